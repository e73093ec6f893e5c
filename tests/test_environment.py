"""environment.yml (conda users) mirrors tools/requirements.txt (make setup): one set of pins."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> set[str]:
    lines = (ROOT / "tools" / "requirements.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_environment_yml_pins_the_same_packages_as_requirements():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(item["pip"] for item in environment["dependencies"] if isinstance(item, dict))
    assert {p for p in pip_section if p != "-e ."} == _requirements()


def test_torch_is_pinned_everywhere():
    constraints = (ROOT / "tools" / "constraints.txt").read_text()
    assert "torch==2.13.0" in _requirements() and "torch==2.13.0" in constraints
    assert '"torch==2.13.0"' in (ROOT / "pyproject.toml").read_text()
