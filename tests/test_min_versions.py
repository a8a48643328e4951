"""Declared floors and the test environment's own versions (issues 12.1 and 17.3).

The lowest-versions job itself is ``tests/run_min_versions.sh`` (run by ``tests/run.sh``);
these tests keep ``setup.py`` honest for it and check that the main test environment got
the current storage packages a user's ``pip install '.[remote]' in the tfbneck clone`` gets.
"""
import datetime
import importlib.metadata as md
import re
import sys

import pytest

import min_versions

#: How old the installed s3fs (or gcsfs, fsspec) may be, by its calendar version
#: (YYYY.M.x): older means the resolver fell back to a release no user installs.
MAX_AGE_DAYS = 365


def version_date(version: str) -> datetime.date:
    """``2026.9.0`` -> 2026-09-01 (fsspec, s3fs and gcsfs use calendar versions since 2021.4).

    Raises:
      ValueError: not a calendar version (e.g. s3fs 0.4.2, from 2020).
    """
    m = re.match(r"^(20\d\d)\.(\d{1,2})\.", version)
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise ValueError(f"{version} is not a calendar version (YYYY.M.x): a release from before 2021")
    return datetime.date(int(m.group(1)), int(m.group(2)), 1)


def test_version_date_reads_calendar_versions():
    assert version_date("2026.9.0") == datetime.date(2026, 9, 1)
    assert version_date("2023.12.2") == datetime.date(2023, 12, 1)
    for old in ("0.4.2", "0.6.0", "2021.13.0"):
        with pytest.raises(ValueError):
            version_date(old)


@pytest.mark.parametrize("package", ["s3fs", "gcsfs", "fsspec"])
def test_storage_packages_are_current(package):
    """The test extras must resolve what users get, not the 2020 s3fs 0.4.2 that pip falls
    back to when moto's boto3 and aiobotocore's botocore pins clash (issue 17.3).
    (The lowest-versions job deselects this test: it installs the floors on purpose.)"""
    try:
        version = md.version(package)
    except md.PackageNotFoundError:
        pytest.skip(f"{package} is not installed (pip install -e '.[test]')")
    age = (datetime.date.today() - version_date(version)).days
    assert age <= MAX_AGE_DAYS, (f"{package} {version} is {age} days old: the test environment no longer "
                                 "resolves the current release (see the test extra in setup.py)")


def test_every_requirement_declares_a_floor():
    """Every requirement of setup.py (install_requires and every extra) has a ``>=`` floor,
    so the lowest-versions job has a version to install for each."""
    kw = min_versions.declared()
    extras = sorted(kw["extras_require"])
    pins = min_versions.pins(extras)
    names = {p.split("==")[0].split("[")[0].lower() for p in pins}
    assert {"numpy", "protobuf", "psutil", "tqdm", "tensorboard", "fsspec", "s3fs", "gcsfs"} <= names
    assert all(re.match(r"^[A-Za-z0-9_.\-]+(\[[^\]]+\])?==[0-9][0-9A-Za-z.]*( ;.*)?$", p) for p in pins), pins


def test_floor_pin_rules():
    assert min_versions.floor_pin("numpy>=1.23.2") == "numpy==1.23.2"
    assert min_versions.floor_pin("moto[server]>=5,<6") == "moto[server]==5"
    assert min_versions.floor_pin("torch==2.13.0") == "torch==2.13.0"
    assert min_versions.floor_pin("x>=1; python_version<'3.12'") == "x==1 ; python_version<'3.12'"
    with pytest.raises(ValueError, match="has no floor"):
        min_versions.floor_pin("s3fs")
    with pytest.raises(ValueError, match="has no floor"):
        min_versions.floor_pin("s3fs<2024")


def test_python_floor_is_this_python_or_older():
    """``python_requires`` names a Python the tests run on: the lowest-versions job uses the
    oldest one declared (3.11 here: the only one on these machines)."""
    floor = tuple(int(x) for x in min_versions.python_floor().split("."))
    assert sys.version_info[:len(floor)] >= floor
