"""The `once` marker: skipped, with its reason, where SHOED_TEST_ONCE=0; run otherwise."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(tmp_path, once: str | None) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_sample.py"
    test.write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.once
            def test_needs_a_browser():
                pass

            def test_everywhere():
                pass
            """
        )
    )
    env = dict(os.environ)
    env.pop("SHOED_TEST_ONCE", None)
    if once is not None:
        env["SHOED_TEST_ONCE"] = once
    # The project's own conftest and markers, on a test file outside the suite.
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            str(test),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_once_tests_run_by_default(tmp_path):
    result = _run(tmp_path, None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    assert "skipped" not in result.stdout


def test_once_tests_are_skipped_with_a_reason_elsewhere(tmp_path):
    result = _run(tmp_path, "0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 1 skipped" in result.stdout
    assert "runs on one interpreter only (SHOED_TEST_ONCE=0 here)" in result.stdout
