"""Version names compared as versions (updates/versions.py)."""

from __future__ import annotations

import pytest

from buildbay.updates.versions import app_version, os_version

# Each list is in increasing order.
ORDERS = [
    ["1.9", "1.10", "1.10.1", "2"],
    ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"],
    ["2.0-SNAPSHOT", "2.0-alpha", "2.0", "2.0.1"],
    ["v1.2", "1.3"],
]


@pytest.mark.parametrize("order", ORDERS)
def test_versions_sort_as_people_mean(order: list[str]) -> None:
    versions = [app_version(v) for v in order]
    assert None not in versions
    assert versions == sorted(versions)  # type: ignore[type-var]
    assert len(set(versions)) == len(versions)


def test_a_semver_build_suffix_does_not_order() -> None:
    assert app_version("1.2.3+45") == app_version("1.2.3")


@pytest.mark.parametrize("text", ["", "  ", "latest", "beta", "x" * 200, "\x00", "1" * 200])
def test_what_is_not_a_version_is_not_compared(text: str) -> None:
    assert app_version(text) is None


def test_os_versions_keep_their_numbers() -> None:
    assert os_version("17.4.1") == app_version("17.4.1")
    assert os_version("34") == app_version("34")
    assert os_version("Android") is None
