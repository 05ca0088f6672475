"""The SHOED_<SECTION>__<KEY> variables (config.py): pydantic-settings ignores a name it
does not know, so a typo would run the daemon on the file's value without a word. Every
variable that has a setting's form is checked here against the settings' model, and the
one that names no setting is refused, naming it.

A name with two underscores (`SHOED_RULES__DECKS`), or a section's name and one
(`SHOED_MQTT_URL`, meant as `SHOED_MQTT__URL`), has a setting's form. Other SHOED_ names
(`SHOED_VENV`, `SHOED_TEST_ONCE`: the scripts' and the tests' own) are not read.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic_settings.exceptions import SettingsError

from .config import ConfigError


def check_environment(settings: type[BaseModel]) -> None:
    """Refuse a SHOED_ variable of a setting's form that names no setting of `settings`."""
    sections = settings.model_fields
    for name in sorted(os.environ):
        upper = name.upper()
        if not upper.startswith("SHOED_"):
            continue
        parts = upper[len("SHOED_"):].split("__")
        if len(parts) == 1:
            for section in sections:
                if parts[0].startswith(section.upper() + "_"):
                    meant = f"SHOED_{section.upper()}__{parts[0][len(section) + 1:]}"
                    raise ConfigError(f"environment variable {name}: not a setting (a "
                                      f"section and its key are joined by two "
                                      f"underscores: {meant})")
            continue
        problem = _not_a_setting(settings, [p.lower() for p in parts], name)
        if problem:
            raise ConfigError(f"environment variable {name}: {problem}")


def _not_a_setting(model: type[BaseModel], parts: list[str], name: str) -> str | None:
    """Why the path `parts` (lower case, as pydantic-settings reads it) is no setting of
    `model`, or None."""
    kind: Any = model
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth])
        if get_origin(kind) is dict:
            # A user of [auth.roles]: pydantic-settings lower-cases it, and a broker's
            # user names are case-sensitive (PitSup1 is not pitsup1).
            written = name.split("__", depth)[-1]
            if written != written.lower():
                return (f"{where} names {written!r}, which would be read as "
                        f"{written.lower()!r} (the environment's names are read in lower "
                        f"case): write the table as JSON, "
                        f"SHOED_{'__'.join(parts[:depth]).upper()}='{{\"{written}\": ...}}'")
            return None
        fields = kind.model_fields if _is_model(kind) else {}
        if part not in fields:
            if not fields:
                return f"{where} is a value, it has no keys"
            known = ", ".join(fields)
            if not where:
                return f"{part!r} is no section of the configuration (sections: {known})"
            return f"{where}.{part} is not a setting ({where} has: {known})"
        kind = _inner(fields[part].annotation)
    return None


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _inner(annotation: Any) -> Any:
    """A section's model, a table's dict, or None (a value), of a field's annotation
    (`Dragon7Section | None` is a section)."""
    for kind in (annotation, *get_args(annotation)):
        if _is_model(kind) or get_origin(kind) is dict:
            return kind
    return None


def env_not_json(error: SettingsError) -> str:
    """pydantic-settings reads a list, a table or a whole section from the environment
    as JSON only, and names just the section it could not parse: name the variables."""
    found = re.search(r'field "([^"]+)"', str(error))
    section = f"SHOED_{found.group(1).upper()}" if found else "SHOED_"
    suspects = []
    for name, value in sorted(os.environ.items()):
        if name.upper() == section or name.upper().startswith(section + "__"):
            try:
                json.loads(value)
            except ValueError:
                suspects.append(f"{name}={value!r}")
    named = f"{' or '.join(suspects)}: " if suspects else ""
    return (f"{named}{error}; a list or a table given in the environment is written as "
            f"JSON, e.g. SHOED_CONSOLE__TABLES='[\"T01\", \"T02\"]'")
