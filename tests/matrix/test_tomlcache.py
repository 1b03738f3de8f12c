"""coverage_db's TOML read back from the parse cache is what the parser gives, and a cache that cannot be
used only costs the parse."""

from __future__ import annotations

import datetime

import pytest

from opaudit import tomlcache
from opaudit.data import data_dir, tomllib
from opaudit.matrix.database import Database
from opaudit.matrix.release import Release


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("OPAUDIT_CACHE_DIR", str(folder))
    tomlcache.cache_dir.cache_clear()
    yield folder
    tomlcache.cache_dir.cache_clear()


def _release_file():
    db = Database()
    return db.root / db.entries[-1].file


def test_a_release_read_back_is_the_parse(cache, monkeypatch):
    text = _release_file().read_text(encoding="utf-8")
    first = tomlcache.loads(text)
    assert first == tomllib.loads(text)
    entries = list(cache.rglob("*.marshal"))
    assert len(entries) == 1

    def no_parse(_text):
        raise AssertionError("parsed again")

    monkeypatch.setattr(tomllib, "loads", no_parse)
    assert tomlcache.loads(text) == first  # from the cache, in the parser's order
    assert list(tomlcache.loads(text)) == list(first)
    with pytest.raises(AssertionError, match="parsed again"):  # an edited text is parsed anew
        tomlcache.loads(text + "\n# edited\n")


def test_releases_are_the_same_with_and_without_the_cache(cache, monkeypatch):
    path = _release_file()
    warm = [Release.load(path) for _ in range(2)][-1]  # the second from the cache
    monkeypatch.setenv("OPAUDIT_CACHE_DIR", "")
    tomlcache.cache_dir.cache_clear()
    assert tomlcache.cache_dir() is None
    cold = Release.load(path)
    assert warm.key == cold.key and warm.ops == cold.ops and warm.all_caveats() == cold.all_caveats()
    assert warm.to_toml() == cold.to_toml()


def test_a_damaged_entry_is_parsed_again_and_replaced(cache):
    text = _release_file().read_text(encoding="utf-8")
    tomlcache.loads(text)
    (entry,) = cache.rglob("*.marshal")
    entry.write_bytes(b"\x00not marshal")
    assert tomlcache.loads(text) == tomllib.loads(text)
    assert tomlcache.loads(text) == tomllib.loads(text)  # the entry was written again
    assert entry.read_bytes() != b"\x00not marshal"


def test_an_unusable_folder_only_costs_the_parse(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("OPAUDIT_CACHE_DIR", str(blocker / "cache"))
    tomlcache.cache_dir.cache_clear()
    try:
        text = (data_dir("coverage_db") / "index.toml").read_text(encoding="utf-8")
        assert tomlcache.loads(text) == tomllib.loads(text)
    finally:
        tomlcache.cache_dir.cache_clear()


def test_what_marshal_cannot_hold_is_not_kept(cache):
    text = "when = 2024-05-01\n" + "# padding\n" * tomlcache.MIN_SIZE
    assert tomlcache.loads(text) == {"when": datetime.date(2024, 5, 1)}
    assert not list(cache.rglob("*.marshal"))
    with pytest.raises(tomllib.TOMLDecodeError):  # errors are the parser's
        tomlcache.loads("x = \n" + "# padding\n" * tomlcache.MIN_SIZE)
