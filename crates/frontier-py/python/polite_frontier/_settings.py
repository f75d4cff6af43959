"""Scrapy settings to the frontier's settings document, with errors that name the
Scrapy setting at fault."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

# Scrapy setting -> (frontier key, converter name). Scrapy's own settings always have a
# value (its defaults); the throttling ones are read only when set.
SCRAPY_KEYS: dict[str, tuple[str, str]] = {
    "CONCURRENT_REQUESTS": ("concurrent_requests", "int"),
    "CONCURRENT_REQUESTS_PER_DOMAIN": ("concurrent_requests_per_domain", "int"),
    "CONCURRENT_REQUESTS_PER_IP": ("concurrent_requests_per_ip", "int"),
    "DOWNLOAD_DELAY": ("download_delay", "seconds"),
}
THROTTLING_KEYS: dict[str, tuple[str, str]] = {
    "THROTTLING_SCOPE_CONCURRENCY": ("throttling_scope_concurrency", "int"),
    "THROTTLING_WINDOW": ("throttling_window", "seconds"),
    "THROTTLING_SCOPE_LIMIT": ("throttling_scope_limit", "int"),
    "THROTTLING_SCOPE_MAX_IDLE": ("throttling_scope_max_idle", "seconds"),
    "THROTTLING_ROBOTSTXT_OBEY": ("throttling_robotstxt_obey", "bool"),
    "THROTTLING_ROBOTSTXT_MAX_DELAY": ("throttling_robotstxt_max_delay", "seconds"),
    "BACKOFF_HTTP_CODES": ("backoff_http_codes", "codes"),
    "BACKOFF_DELAY_FACTOR": ("backoff_delay_factor", "number"),
    "BACKOFF_MIN_DELAY": ("backoff_min_delay", "seconds"),
    "BACKOFF_MAX_DELAY": ("backoff_max_delay", "seconds"),
    "BACKOFF_JITTER": ("backoff_jitter", "jitter"),
    "BACKOFF_WINDOW": ("backoff_window", "seconds"),
    "RAMPUP_BACKOFF_TARGET": ("rampup_backoff_target", "target"),
    "DELAYED_REQUESTS_WARN_THRESHOLD": ("delayed_requests_warn_threshold", "int"),
    "THROTTLING_SEED": ("seed", "int"),
}
SCOPE_KEYS = {
    "concurrency": "int",
    "min_concurrency": "int",
    "max_concurrency": "int",
    "delay": "seconds",
    "jitter": "jitter",
    "quota": "number",
    "window": "seconds",
    "rampup": "rampup",
    "backoff": "backoff",
    "ignore_robots_txt": "bool",
}
BACKOFF_KEYS = {
    "http_codes": "codes",
    "exceptions": "exceptions",
    "delay_factor": "number",
    "max_delay": "seconds",
    "min_delay": "seconds",
    "jitter": "jitter",
}
RAMPUP_KEYS = {
    "backoff_target": "target",
    "delay_factor": "number",
    "min_delay": "seconds",
    "step_back": "bool",
}

# Frontier key -> Scrapy name, to translate the engine's validation errors.
_TO_SCRAPY = {key: name for name, (key, _) in {**SCRAPY_KEYS, **THROTTLING_KEYS}.items()}
_TO_SCRAPY["randomize_download_delay"] = "DOWNLOAD_DELAY_JITTER"
_TO_SCRAPY["backoff_exceptions"] = "BACKOFF_EXCEPTIONS"


class SettingsError(ValueError):
    """A Scrapy setting (or request meta key) has a value the frontier cannot use."""


def _repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise SettingsError(f"{name} must be a whole number, got {_repr(value)}")
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    elif isinstance(value, int):
        return value
    elif isinstance(value, float) and value.is_integer():
        return int(value)
    raise SettingsError(f"{name} must be a whole number, got {_repr(value)}")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise SettingsError(f"{name} must be a number, got {_repr(value)}")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise SettingsError(f"{name} must be a number, got {_repr(value)}") from None
    if not math.isfinite(number):
        raise SettingsError(f"{name} must be a finite number, got {_repr(value)}")
    return number


def _seconds(name: str, value: Any) -> float:
    number = _number(name, value)
    if number < 0:
        raise SettingsError(f"{name} must be a number of seconds >= 0, got {_repr(value)}")
    return number


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise SettingsError(f"{name} must be True or False, got {_repr(value)}")


def _jitter(name: str, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise SettingsError(f"{name} must be a fraction or a [low, high] pair, got {_repr(value)}")
        return [_number(f"{name}[0]", value[0]), _number(f"{name}[1]", value[1])]
    return _number(name, value)


def _target(name: str, value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise SettingsError(f"{name} must be a whole number or a [low, high] pair, got {_repr(value)}")
        return [_int(f"{name}[0]", value[0]), _int(f"{name}[1]", value[1])]
    return _int(name, value)


def _codes(name: str, value: Any) -> list[int]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise SettingsError(f"{name} must be a list of HTTP status codes, got {_repr(value)}")
    return sorted({_int(f"{name} item", v) for v in value})


def _table(name: str, value: Any, keys: dict[str, str], exceptions: Callable[[str, Any], Any]) -> dict:
    if not isinstance(value, dict):
        if hasattr(value, "__dict__") and not isinstance(value, type):
            value = {k: v for k, v in vars(value).items() if not k.startswith("_")}
        else:
            raise SettingsError(f"{name} must be a dict, got {_repr(value)}")
    out = {}
    for key, item in value.items():
        if key not in keys:
            known = ", ".join(sorted(keys))
            raise SettingsError(f"{name}: unknown key {key!r} (known keys: {known})")
        if item is None:
            continue
        out[key] = _convert(f"{name}[{key!r}]", keys[key], item, exceptions)
    return out


def _convert(name: str, kind: str, value: Any, exceptions: Callable[[str, Any], Any]) -> Any:
    if kind == "int":
        return _int(name, value)
    if kind == "number":
        return _number(name, value)
    if kind == "seconds":
        return _seconds(name, value)
    if kind == "bool":
        return _bool(name, value)
    if kind == "jitter":
        return _jitter(name, value)
    if kind == "target":
        return _target(name, value)
    if kind == "codes":
        return _codes(name, value)
    if kind == "exceptions":
        return exceptions(name, value)
    if kind == "backoff":
        return _table(name, value, BACKOFF_KEYS, exceptions)
    if kind == "rampup":
        if isinstance(value, bool):
            return value
        return _table(name, value, RAMPUP_KEYS, exceptions)
    raise AssertionError(kind)


def translate_error(message: str) -> str:
    """Rewrites the engine's key paths (`scopes."x".delay`) into Scrapy names."""

    def scope(match: re.Match) -> str:
        return f'THROTTLING_SCOPES["{match.group(1)}"]' + "".join(
            f"[{part!r}]" for part in match.group(2).split(".") if part
        )

    message = re.sub(r'scopes\."([^"]*)"((?:\.[a-z_]+)*)', scope, message)
    for key, name in sorted(_TO_SCRAPY.items(), key=lambda kv: -len(kv[0])):
        message = re.sub(rf"(?<![\w\[']){key}(?![\w'])", name, message)
    return message


def frontier_settings(
    settings: Any, exceptions: Callable[[str, Any], Any]
) -> dict[str, Any]:
    """The frontier's settings document from Scrapy settings (a `BaseSettings` or a dict).

    `exceptions(name, value)` converts a list of exception classes into error kinds.
    """
    get = settings.get
    doc: dict[str, Any] = {}
    for name, (key, kind) in SCRAPY_KEYS.items():
        value = get(name)
        if value is not None:
            doc[key] = _convert(name, kind, value, exceptions)
    for name, (key, kind) in THROTTLING_KEYS.items():
        value = get(name)
        if value is not None:
            doc[key] = _convert(name, kind, value, exceptions)
    # Jitter: DOWNLOAD_DELAY_JITTER, or the older RANDOMIZE_DOWNLOAD_DELAY when it was set
    # at a higher priority (Scrapy's own rule).
    jitter = get("DOWNLOAD_DELAY_JITTER")
    randomize = get("RANDOMIZE_DOWNLOAD_DELAY")
    getpriority = getattr(settings, "getpriority", None)
    if randomize is not None and (
        jitter is None
        or (getpriority is not None and (getpriority("RANDOMIZE_DOWNLOAD_DELAY") or 0) > (getpriority("DOWNLOAD_DELAY_JITTER") or 0))
    ):
        doc["randomize_download_delay"] = 0.5 if _bool("RANDOMIZE_DOWNLOAD_DELAY", randomize) else False
    elif jitter is not None:
        doc["randomize_download_delay"] = _jitter("DOWNLOAD_DELAY_JITTER", jitter)
    # The order of ordinary and start requests within a priority.
    mq = str(get("SCHEDULER_MEMORY_QUEUE") or "")
    if "fifo" in mq.lower():
        doc["scheduler_order"] = "fifo"
    smq = get("SCHEDULER_START_MEMORY_QUEUE")
    if smq is not None:
        smq = str(smq)
        doc["start_order"] = "same" if not smq else ("lifo" if "lifo" in smq.lower() else "fifo")
    scopes = get("THROTTLING_SCOPES")
    if scopes:
        if not isinstance(scopes, dict) and hasattr(settings, "getdict"):
            scopes = settings.getdict("THROTTLING_SCOPES")
        if not isinstance(scopes, dict):
            raise SettingsError(f"THROTTLING_SCOPES must be a dict of scope names to configurations, got {_repr(scopes)}")
        doc["scopes"] = {}
        for scope, config in scopes.items():
            if not isinstance(scope, str) or not scope:
                raise SettingsError(f"THROTTLING_SCOPES: a scope name must be a non-empty str, got {_repr(scope)}")
            doc["scopes"][scope] = _table(f"THROTTLING_SCOPES[{scope!r}]", config or {}, SCOPE_KEYS, exceptions)
    return doc


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc)
