"""docs/SETTINGS.md is generated from the settings' declarations (``python -m triton_kiln.settings_page``)."""

from __future__ import annotations

from pathlib import Path

from triton_kiln import settings, settings_page

PAGE = Path(__file__).resolve().parents[1] / "docs" / "SETTINGS.md"


def test_the_committed_settings_page_is_the_generators_output() -> None:
    assert PAGE.read_text() == settings_page.markdown(), (
        "docs/SETTINGS.md differs from the declarations in src/triton_kiln/settings.py; "
        "regenerate it: python -m triton_kiln.settings_page > docs/SETTINGS.md"
    )


def test_every_setting_has_a_row_with_its_meaning() -> None:
    docs = settings_page.field_docs()
    page = settings_page.markdown()
    for name, var in settings.variables().items():
        assert docs.get(name, "").strip(), f"the field {name} ({var}) has no docstring to document it"
        assert f"| `{var}` |" in page, var
