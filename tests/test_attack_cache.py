"""Attacks on the artifact cache (issue 12, items 1, 3-5): each ends in a kiln error or a
warned miss, and nothing outside kiln's own files is read or written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiln.artifacts.store import ArtifactStore
from kiln.errors import CacheDirError


def test_world_writable_cache_dir_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.raises(CacheDirError, match="writable by others") as info:
        ArtifactStore(root)
    assert "chmod go-w" in str(info.value)


def test_cache_dir_is_created_private(tmp_path: Path) -> None:
    root = tmp_path / "new" / "cache"
    ArtifactStore(root)
    assert (root.stat().st_mode & 0o777) == 0o700


def test_cache_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        root = tmp_path / "theirs"
        root.mkdir(mode=0o700)
        os.chown(root, 12345, 12345)
        owner = 12345
    else:
        root, owner = Path("/"), 0
    with pytest.raises(CacheDirError, match=f"belongs to user id {owner}") as info:
        ArtifactStore(root)
    assert "KILN_CACHE_DIR" in str(info.value)
