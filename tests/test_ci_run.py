"""`.ci/run` and `scripts/bootstrap` say plainly what they cannot do."""

from __future__ import annotations

import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ci_run_names_a_python_it_cannot_find_and_fails() -> None:
    env = dict(os.environ, SHOED_CI_PYTHONS="9.9")
    done = subprocess.run([str(ROOT / ".ci" / "run")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    assert "no Python 9.9 on this machine" in done.stderr
    assert "9.9" in done.stderr and "not found, not tested" in done.stderr
    assert "no Python found at all" in done.stderr


def test_bootstrap_refuses_an_interpreter_that_is_not_one(tmp_path: pathlib.Path) -> None:
    env = dict(os.environ, SHOED_PYTHON=str(tmp_path / "python9"),
               SHOED_VENV=str(tmp_path / "venv"))
    done = subprocess.run([str(ROOT / "scripts" / "bootstrap")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"{tmp_path / 'python9'} is not a working Python 3.11 or newer" in done.stderr
    assert not (tmp_path / "venv").exists()
