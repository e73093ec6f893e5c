"""Facet-decoupled attention equals K separate forward passes, on both real decoders of the small config.

The reference is the obvious computation: for each facet, an ordinary left-padded batch of
``prefix + suffix_k`` prompts (and, for a few prompts, the whole prompt string run alone, unpadded).
"""
from __future__ import annotations

import pytest
import torch

from lib.core import facets
from lib.core.encoders import EncoderInputError
from lib.core.facets import FACET_SETS, FACETS_LONG, FacetConfig, FacetEncoder, decoupled_inputs, split_template
from lib.core.store import FeatureStore

MODELS = {"smollm2": "offline/smollm2-135m-instruct", "gemma": "offline/gemma-3-270m"}
DEPTH = {"smollm2": 30, "gemma": 18}
# Different lengths (so the batch is left padded), a quote inside, non-ASCII, a trailing period.
CAPTIONS = [
    "cat",
    'grinning face. Keywords: cheerful, "happy", grin, smile. Group: smileys & emotion, smiling.',
    "man rowing boat: boat, rowing, man — sport",
]
FACETS = FACETS_LONG[:3]
TOLERANCE = 1e-4  # fp32


@pytest.fixture(scope="module")
def encoders():
    torch.set_num_threads(1)
    return {key: FacetEncoder(name, facets=FACETS, batch_size=2) for key, name in MODELS.items()}


def _alone(encoder: FacetEncoder, caption: str) -> torch.Tensor:
    """Each full prompt string tokenised as a whole and run alone (no padding): ``[K, D]``."""
    rows = []
    for prompt in encoder.prompts(caption):
        batch = encoder.tokenizer(prompt, return_tensors="pt")
        rows.append(encoder.model(**batch).last_hidden_state[0, -1])
    return torch.stack(rows)


def test_split_template_moves_the_space_before_the_facet_into_the_suffix():
    prefix, suffix = split_template(facets.FLAME_TEMPLATE)
    assert prefix == 'Detailed image description: "{caption}". After thinking step by step,'
    assert suffix == ' {facet} means in just one word:"'
    with pytest.raises(ValueError, match="before"):
        split_template("{facet} then {caption}")
    with pytest.raises(ValueError, match="exactly one"):
        split_template("no placeholders")
    assert len(FACET_SETS["long"]) == 7 and len(FACET_SETS["single"]) == 1


def test_decoupled_inputs_layout_mask_and_positions():
    inputs = decoupled_inputs([[5, 6, 7], [8]], [[1, 2], [3]], pad_id=0)
    assert inputs["input_ids"].tolist() == [[5, 6, 7, 1, 2, 3], [0, 0, 8, 1, 2, 3]]
    assert inputs["position_ids"].tolist() == [[0, 1, 2, 3, 4, 3], [0, 0, 0, 1, 2, 1]]
    assert inputs["final"].tolist() == [4, 5]
    visible = (inputs["mask"][:, 0] == 0).int().tolist()
    assert visible[0] == [  # prefix causal; facet 2's token sees the prefix and itself, not facet 1
        [1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 1],
    ]
    assert visible[1] == [  # padding sees only itself and is seen by nobody
        [1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0],
        [0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0], [0, 0, 1, 0, 0, 1],
    ]
    contiguous = decoupled_inputs([[5, 6, 7]], [[1, 2], [3]], pad_id=0, positions="contiguous")
    assert contiguous["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5]]  # the official code's positions
    windowed = decoupled_inputs([[5, 6, 7]], [[1, 2], [3]], pad_id=0, sliding_window=2)
    assert (windowed["window_mask"][0, 0, 5] == 0).int().tolist() == [0, 0, 1, 0, 0, 1]  # q-k < 2 in positions


@pytest.mark.parametrize("key", list(MODELS))
def test_prefix_plus_suffix_tokens_equal_the_whole_prompts_tokens(encoders, key):
    from corpora import emoji

    encoder = encoders[key]
    captions = CAPTIONS + [emoji.caption(c, "long") for c in emoji.load_concepts()[::150]]
    prefixes = encoder.tokenize_prefixes(captions)
    long_suffixes = [encoder.tokenizer(encoder.suffix_template.replace("{facet}", f), add_special_tokens=False)
                     ["input_ids"] for f in FACETS_LONG]
    for caption, prefix in zip(captions, prefixes):
        prefix_text = encoder.prefix_text(caption)
        for facet, suffix in zip(FACETS_LONG, long_suffixes):
            whole = prefix_text + encoder.suffix_template.replace("{facet}", facet)
            assert prefix + suffix == encoder.tokenizer(whole)["input_ids"], whole


@pytest.mark.parametrize("key", list(MODELS))
def test_decoupled_attention_equals_separate_passes(encoders, key):
    encoder = encoders[key]
    with torch.no_grad():
        decoupled = encoder.encode(CAPTIONS, method="decoupled", progress=False)
        separate = encoder.encode(CAPTIONS, method="separate", progress=False)
        alone = torch.stack([_alone(encoder, c) for c in CAPTIONS[:2]])
    assert decoupled.shape == (3, len(FACETS), encoder.dim)
    assert (decoupled - separate).abs().max().item() <= TOLERANCE
    assert (decoupled[:2] - alone).abs().max().item() <= TOLERANCE
    # the facets really differ (the test would be empty if every suffix gave the same vector)
    assert (decoupled[:, 0] - decoupled[:, 1]).abs().max().item() > 1.0


@pytest.mark.parametrize("key", list(MODELS))
def test_penultimate_layer_equals_separate_passes(encoders, key):
    """The official code's layer (block depth-1, before the final norm). Its states are large (Gemma's
    reach ~3e4: "massive activations"), so fp32 rounding alone is ~1e-2 in absolute terms; the check
    is relative to each vector's norm."""
    encoder = encoders[key]
    encoder.layer = DEPTH[key] - 1
    try:
        with torch.no_grad():
            decoupled = encoder.encode(CAPTIONS, method="decoupled", progress=False)  # forward hook
            separate = encoder.encode(CAPTIONS, method="separate", progress=False)  # output_hidden_states
    finally:
        encoder.layer = -1
    relative = (decoupled - separate).norm(dim=-1) / separate.norm(dim=-1)
    assert relative.max().item() <= 1e-5


def test_sliding_window_layers_see_the_window_of_a_separate_pass(encoders):
    """Gemma 3 mixes sliding-window (512) and full layers. Shrink the window below the prompt length so
    it binds: the decoupled pass must then hand the sliding layers a mask with the window on logical
    positions (the row is longer than any single prompt), and still equal separate passes."""
    encoder = encoders["gemma"]
    config = encoder.model.config
    before = config.sliding_window
    config.sliding_window = 8
    try:
        with torch.no_grad():
            decoupled = encoder.encode(CAPTIONS[1:], method="decoupled", progress=False)
            separate = encoder.encode(CAPTIONS[1:], method="separate", progress=False)
    finally:
        config.sliding_window = before
    with torch.no_grad():
        full_window = encoder.encode(CAPTIONS[1:], method="decoupled", progress=False)
    assert (decoupled - separate).abs().max().item() <= TOLERANCE
    assert (decoupled - full_window).abs().max().item() > 1e-2  # the window did bind


def test_contiguous_positions_differ_from_separate_passes_after_the_first_facet(encoders):
    encoder = encoders["smollm2"]
    with torch.no_grad():
        reset = encoder.encode(CAPTIONS, progress=False)
        encoder.positions = "contiguous"
        try:
            contiguous = encoder.encode(CAPTIONS, progress=False)
        finally:
            encoder.positions = "reset"
    assert (reset[:, 0] - contiguous[:, 0]).abs().max().item() <= TOLERANCE
    assert (reset[:, 1:] - contiguous[:, 1:]).abs().max().item() > 1e-2


def test_bad_inputs_are_refused(encoders):
    encoder = encoders["smollm2"]
    with pytest.raises(EncoderInputError, match="empty"):
        encoder.encode(["cat", "  "], progress=False)
    with pytest.raises(ValueError, match="method"):
        encoder.encode(["cat"], method="fast", progress=False)
    with pytest.raises(ValueError, match="4-D mask"):
        FacetEncoder(MODELS["smollm2"], attn_implementation="flash_attention_2")


def test_long_captions_are_cut_inside_the_quotes(encoders):
    encoder = encoders["smollm2"]
    encoder.max_caption_tokens = 5
    try:
        prompt = encoder.prompts("one two three four five six seven eight nine ten")[0]
    finally:
        encoder.max_caption_tokens = 256
    assert prompt.startswith('Detailed image description: "one two three four five". After thinking step by step,')
    assert prompt.endswith('this image description means in just one word:"')


def test_facet_features_are_cached_in_caption_major_rows(encoders, tmp_path, monkeypatch):
    """A ``features.facets`` request: rows ``i*K + k``; shards of 4 rows cut captions' facets (K = 3) and must
    still give the same numbers; the second materialisation reads the store and never runs the model."""
    from lib.core import features

    cfg = FacetConfig(MODELS["smollm2"], facets=FACETS, batch_size=2)
    monkeypatch.setitem(features.ENCODERS._encoders, (cfg, "cpu", "eager"), encoders["smollm2"])
    store = FeatureStore(tmp_path / "store")
    request = features.facets(cfg, CAPTIONS, source={"test": "captions"}, name="facets:test", ids=["a", "b", "c"],
                              dtype="float32", shard_rows=4)
    with torch.no_grad():
        expected = encoders["smollm2"].encode(CAPTIONS, progress=False)
    found = features.materialise(store, [request], release=False)
    assert found["facets:test"].ids == ["a#0", "a#1", "a#2", "b#0", "b#1", "b#2", "c#0", "c#1", "c#2"]
    got = found.tensor("facets:test")
    assert got.shape == (3, 3, encoders["smollm2"].dim)
    assert (got - expected).abs().max().item() <= TOLERANCE
    assert found.counts() == (3, 0)  # 9 rows in shards of 4

    def explode(*args, **kwargs):
        raise AssertionError("a cache hit must not run the model")

    monkeypatch.setattr(encoders["smollm2"], "encode", explode)
    again = features.materialise(store, [request], release=False)
    assert torch.equal(again.tensor("facets:test"), got) and again.counts() == (0, 3)
    other = features.facets(FacetConfig(MODELS["smollm2"], facets=FACETS, layer=29), CAPTIONS,
                            source={"test": "captions"}, name="facets:other", ids=["a", "b", "c"], dtype="float32")
    assert store.entry_dir(features.spec_of(other)) != store.entry_dir(features.spec_of(request))


@pytest.mark.parametrize("key", list(MODELS))
def test_the_official_template_splits_at_a_token_boundary(encoders, key):
    """The official code's wording (``lib.methods.flame.OFFICIAL_TEMPLATE``, spaces before punctuation) keeps the
    prefix + suffix = whole-prompt tokenisation that decoupled attention relies on."""
    from lib.methods.flame import OFFICIAL_TEMPLATE, official_caption

    prefix_template, suffix_template = split_template(OFFICIAL_TEMPLATE)
    assert prefix_template == 'Image description : "{caption}" . After thinking step by step ,'
    tokenizer = encoders[key].tokenizer
    for caption in CAPTIONS:
        prefix = prefix_template.replace("{caption}", facets.clean_caption(official_caption(caption)))
        for facet in FACETS:
            suffix = suffix_template.replace("{facet}", facet)
            assert (tokenizer(prefix)["input_ids"] + tokenizer(suffix, add_special_tokens=False)["input_ids"]
                    == tokenizer(prefix + suffix)["input_ids"]), prefix + suffix


def test_facet_config_builds_from_yaml_data_and_refuses_bad_templates():
    from lib.core.config import ConfigError, build

    cfg = build(FacetConfig, {"name": "offline/gemma-3-270m", "facets": ["this image description"], "layer": 17})
    assert cfg.facets == ("this image description",) and cfg.positions == "reset"
    with pytest.raises(ConfigError, match="caption"):
        build(FacetConfig, {"name": "offline/gemma-3-270m", "template": "{facet} only"})
    with pytest.raises(ConfigError, match="positions"):
        build(FacetConfig, {"name": "offline/gemma-3-270m", "positions": "shifted"})
