"""Prompt templates for zero-shot classification.

Why templates: a class name alone ("crane") is an ambiguous, out-of-distribution caption. CLIP
(Radford et al. 2021, section 3.1.4) fills each class name into many caption-like templates, embeds each
one, and averages the normalised embeddings into one class prototype ("prompt ensembling"); this adds
a few points of ImageNet accuracy. See notebooks/sharelock.py, section "Zero-shot evaluation", and
:func:`lib.core.evaluate.zero_shot_classifier`, which consumes these lists.

Every template is a format string with a ``{c}`` placeholder for the class name.

* ``IMAGENET_TEMPLATES``: CLIP's 80 ImageNet templates, in the order of OpenAI's notebook and of
  ``open_clip.zero_shot_metadata.OPENAI_IMAGENET_TEMPLATES`` (a test checks they are equal).
* ``IMAGENET_TEMPLATES_7``: the 7-template subset that OpenAI found by sequential forward selection
  to do about as well as all 80 (open_clip's ``SIMPLE_IMAGENET_TEMPLATES``).
* ``PHOTO_TEMPLATES``: the templates used for real photographs (an alias of the 7).
* ``EMOJI_TEMPLATES``: a handful of templates for the emoji corpus of the small config, where
  "a photo of" would describe the wrong kind of image.
"""
from __future__ import annotations

__all__ = ["IMAGENET_TEMPLATES", "IMAGENET_TEMPLATES_7", "PHOTO_TEMPLATES", "EMOJI_TEMPLATES", "NAME_ONLY"]

IMAGENET_TEMPLATES: list[str] = [
    "a bad photo of a {c}.",
    "a photo of many {c}.",
    "a sculpture of a {c}.",
    "a photo of the hard to see {c}.",
    "a low resolution photo of the {c}.",
    "a rendering of a {c}.",
    "graffiti of a {c}.",
    "a bad photo of the {c}.",
    "a cropped photo of the {c}.",
    "a tattoo of a {c}.",
    "the embroidered {c}.",
    "a photo of a hard to see {c}.",
    "a bright photo of a {c}.",
    "a photo of a clean {c}.",
    "a photo of a dirty {c}.",
    "a dark photo of the {c}.",
    "a drawing of a {c}.",
    "a photo of my {c}.",
    "the plastic {c}.",
    "a photo of the cool {c}.",
    "a close-up photo of a {c}.",
    "a black and white photo of the {c}.",
    "a painting of the {c}.",
    "a painting of a {c}.",
    "a pixelated photo of the {c}.",
    "a sculpture of the {c}.",
    "a bright photo of the {c}.",
    "a cropped photo of a {c}.",
    "a plastic {c}.",
    "a photo of the dirty {c}.",
    "a jpeg corrupted photo of a {c}.",
    "a blurry photo of the {c}.",
    "a photo of the {c}.",
    "a good photo of the {c}.",
    "a rendering of the {c}.",
    "a {c} in a video game.",
    "a photo of one {c}.",
    "a doodle of a {c}.",
    "a close-up photo of the {c}.",
    "a photo of a {c}.",
    "the origami {c}.",
    "the {c} in a video game.",
    "a sketch of a {c}.",
    "a doodle of the {c}.",
    "a origami {c}.",
    "a low resolution photo of a {c}.",
    "the toy {c}.",
    "a rendition of the {c}.",
    "a photo of the clean {c}.",
    "a photo of a large {c}.",
    "a rendition of a {c}.",
    "a photo of a nice {c}.",
    "a photo of a weird {c}.",
    "a blurry photo of a {c}.",
    "a cartoon {c}.",
    "art of a {c}.",
    "a sketch of the {c}.",
    "a embroidered {c}.",
    "a pixelated photo of a {c}.",
    "itap of the {c}.",
    "a jpeg corrupted photo of the {c}.",
    "a good photo of a {c}.",
    "a plushie {c}.",
    "a photo of the nice {c}.",
    "a photo of the small {c}.",
    "a photo of the weird {c}.",
    "the cartoon {c}.",
    "art of the {c}.",
    "a drawing of the {c}.",
    "a photo of the large {c}.",
    "a black and white photo of a {c}.",
    "the plushie {c}.",
    "a dark photo of a {c}.",
    "itap of a {c}.",
    "graffiti of the {c}.",
    "a toy {c}.",
    "itap of my {c}.",
    "a photo of a cool {c}.",
    "a photo of a small {c}.",
    "a tattoo of the {c}.",
]

IMAGENET_TEMPLATES_7: list[str] = [
    "itap of a {c}.",
    "a bad photo of the {c}.",
    "a origami {c}.",
    "a photo of the large {c}.",
    "a {c} in a video game.",
    "art of the {c}.",
    "a photo of the small {c}.",
]

PHOTO_TEMPLATES: list[str] = IMAGENET_TEMPLATES_7

EMOJI_TEMPLATES: list[str] = [
    "an emoji of {c}.",
    "a picture of {c}.",
    "an icon of {c}.",
    "a cartoon of {c}.",
    "{c}.",
]


# The class name itself as the prompt. Why: a decoder's last-token feature is dominated by the end
# of the text, so a head trained on bare CLDR names ("grinning face") reads "an emoji of grinning
# face." - whose last token is "." - as a different kind of text. The ShareLock chapter measures this
# ("Prompts must look like the training captions").
NAME_ONLY: list[str] = ["{c}"]
