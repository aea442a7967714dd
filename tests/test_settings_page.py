"""docs/SETTINGS.md is generated from the settings' declarations (``python -m triton_kiln.settings_page``)."""

from __future__ import annotations

from pathlib import Path

from triton_kiln import settings, settings_page

PAGE = Path(__file__).resolve().parents[1] / "docs" / "SETTINGS.md"


def test_the_committed_settings_page_is_the_generators_output() -> None:
    assert PAGE.read_text() == settings_page.markdown(), (
        "docs/SETTINGS.md differs from the declarations in src/triton_kiln/settings.py; "
        f"regenerate it: {settings_page.COMMAND}"
    )


def test_the_page_names_the_command_that_writes_it() -> None:
    comment = next(line for line in PAGE.read_text().splitlines() if line.startswith("<!--"))
    assert f"`{settings_page.COMMAND}`" in comment
    assert "do not edit" in comment


def test_every_setting_has_a_row_with_its_meaning_in_its_areas_section() -> None:
    page = settings_page.markdown()
    for name, declared in settings.declarations().items():
        assert declared.doc.strip(), f"the setting {name} ({declared.variable}) declares no meaning"
        row = f"| `{declared.variable}` | {settings_page.default_text(name)} | "
        assert row in page, declared.variable
        section = page.index(f"\n## {declared.area.title}\n")
        following = page.find("\n## ", section + 1)
        assert section < page.index(row) < (following if following > 0 else len(page)), declared.variable


def test_a_computed_or_unset_default_is_described_not_shown() -> None:
    assert settings_page.default_text("workers") == "one per CPU core this process may run on"
    assert settings_page.default_text("cache_dir") == "`$XDG_CACHE_HOME/kiln` (`~/.cache/kiln`)"
    assert settings_page.default_text("tuning_db") == "unset (`<cache dir>/tuning.sqlite3`)"
    assert settings_page.default_text("job_timeout_s") == "600"
    assert settings_page.default_text("keep_ir") == "0"
