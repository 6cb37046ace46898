"""The one typed crawl configuration.

Every external limit has a default here (timeouts, body size, redirects, URL length, depth, pages per
host) so that no component invents its own. Values come, in increasing precedence, from the dataclass
defaults, a YAML file (``include/config/crawl.yaml`` documents each key), environment variables
``CRAWL_<KEY>`` and explicit overrides (CLI flags, DAG params). An invalid value raises
:class:`ConfigError` naming the key, before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from crawl.scope import ScopeError, compile_allowed_hosts

PRODUCT_TOKEN = "RecrawlBot"
DEFAULT_USER_AGENT = f"{PRODUCT_TOKEN}/0.1 (+https://github.com/recrawl/recrawl/blob/main/README.md)"
DEFAULT_TRACKING_PARAMS = (
    "utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content", "utm_id",
    "gclid", "dclid", "fbclid", "msclkid", "mc_cid", "mc_eid", "_ga", "yclid",
    "sessionid", "sid", "phpsessid", "jsessionid",
)
# Anchored with ^...$ so the pattern also works as a JSON-schema / pydantic ``pattern`` (searched);
# in Python always match it whole (is_crawl_id): re's ``$`` also matches before a trailing newline.
CRAWL_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def is_crawl_id(value: object) -> bool:
    """True for a valid crawl id: the whole string matches :data:`CRAWL_ID_RE` (no trailing newline)."""
    return isinstance(value, str) and CRAWL_ID_RE.fullmatch(value) is not None


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""


@dataclass(frozen=True)
class CrawlConfig:
    # identity and storage
    crawl_id: str = "demo"
    root: str = "crawldata"
    user_agent: str = DEFAULT_USER_AGENT
    robots_agent: str = PRODUCT_TOKEN

    # round budget and frontier
    max_pages: int = 1000
    max_pages_per_host: int = 100_000
    max_pages_per_host_per_round: int = 0  # 0 = derived from round_duration_s / host delay
    round_duration_s: float = 3600.0
    coverage_share: float = 0.3
    schedule_policy: str = "default"  # default | estimator | nutch | uniform | oracle (crawl.schedule)
    oracle_rates_path: str = ""  # Parquet (url, change_rate per day) for the oracle policy (benchmarks)
    partitions: int = 8
    url_shards: int = 4
    politeness_key: str = "host"  # host | domain | ip

    # politeness
    politeness_delay_s: float = 1.0
    max_crawl_delay_s: float = 30.0
    max_in_flight_per_host: int = 1
    max_host_errors: int = 5
    backoff_base_s: float = 60.0
    backoff_cap_s: float = 86_400.0
    backoff_jitter: float = 0.1
    robots_ttl_s: float = 86_400.0
    robots_max_bytes: int = 512_000
    max_concurrent_hosts: int = 512
    sitemaps: bool = True  # fetch Sitemap: files (or /sitemap.xml) of hosts whose robots.txt is fetched fresh
    max_sitemaps_per_host: int = 10  # sitemap files (index children included) fetched per host and round

    # per-request limits
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 15.0
    total_timeout_s: float = 30.0
    max_body_bytes: int = 2_000_000
    max_redirects: int = 5
    max_url_length: int = 2048

    # traps and scope
    max_depth: int = 15
    max_path_repeats: int = 2
    max_path_segments: int = 20
    max_query_params: int = 8
    max_outlinks_per_page: int = 500
    allowed_hosts: str = ""  # regex on the host; empty = any host
    tracking_params: tuple[str, ...] = DEFAULT_TRACKING_PARAMS

    # retries of transient failures (seconds until the next try; after the last try: gone)
    retry_schedule_s: tuple[float, ...] = (3600.0, 21_600.0, 86_400.0)

    # dedup
    bloom_fp_rate: float = 0.01
    bloom_expected_urls: int = 1_000_000
    simhash_max_distance: int = 3

    # network
    resolve: tuple[str, ...] = ()  # 'PATTERN=IP:PORT', e.g. '*.sim.test=127.0.0.1:8800'
    allow_private_networks: bool = False  # connect to loopback/private/reserved addresses (SSRF guard off)
    verify_tls: bool = True  # verify TLS certificates; false only for test servers with self-signed ones

    # Dask
    dask_address: str = ""  # empty = embedded LocalCluster
    dask_workers: int = 2

    def replace(self, **changes: Any) -> CrawlConfig:
        return load_config(overrides={**dataclasses.asdict(self), **changes}, use_env=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


_POSITIVE = {
    "max_pages", "max_pages_per_host", "partitions", "url_shards", "max_in_flight_per_host",
    "max_host_errors", "robots_max_bytes", "max_concurrent_hosts", "connect_timeout_s",
    "read_timeout_s", "total_timeout_s", "max_body_bytes", "max_url_length", "round_duration_s",
    "max_query_params", "max_outlinks_per_page", "bloom_expected_urls", "dask_workers",
    "max_path_segments", "max_sitemaps_per_host",
}
_NON_NEGATIVE = {
    "politeness_delay_s", "max_crawl_delay_s", "backoff_base_s", "backoff_cap_s", "robots_ttl_s",
    "max_redirects", "max_depth", "max_path_repeats", "max_pages_per_host_per_round",
    "simhash_max_distance",
}
_RESOLVE_RE = re.compile(r"^[^=\s]+=[0-9a-fA-F:.\[\]]+:\d{1,5}$")


def _coerce(key: str, typ: Any, value: Any) -> Any:
    """Turn a value from YAML, env or a flag into the field's type, or fail naming the key."""
    type_name = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in {"1", "true", "yes", "on"}:
                return True
            if isinstance(value, str) and value.strip().lower() in {"0", "false", "no", "off", ""}:
                return False
            raise ValueError
        if typ is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if typ is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if typ is str:
            if not isinstance(value, str):
                raise ValueError
            return value
        if str(typ).startswith("tuple"):
            if isinstance(value, str):
                value = [v for v in re.split(r"[,\s]+", value) if v]
            if not isinstance(value, (list, tuple)):
                raise ValueError
            inner = typ.__args__[0]
            return tuple(_coerce(key, inner, v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected {type_name}, got {value!r}") from None
    raise ConfigError(f"{key}: unsupported type {type_name}")


def _validate(cfg: CrawlConfig) -> None:
    for key in _POSITIVE:
        if getattr(cfg, key) <= 0:
            raise ConfigError(f"{key}: must be > 0, got {getattr(cfg, key)!r}")
    for key in _NON_NEGATIVE:
        if getattr(cfg, key) < 0:
            raise ConfigError(f"{key}: must be >= 0, got {getattr(cfg, key)!r}")
    if not 0.0 <= cfg.coverage_share <= 1.0:
        raise ConfigError(f"coverage_share: must be between 0 and 1, got {cfg.coverage_share!r}")
    if not 0.0 < cfg.bloom_fp_rate < 0.5:
        raise ConfigError(f"bloom_fp_rate: must be in (0, 0.5), got {cfg.bloom_fp_rate!r}")
    if not 0.0 <= cfg.backoff_jitter < 1.0:
        raise ConfigError(f"backoff_jitter: must be in [0, 1), got {cfg.backoff_jitter!r}")
    if cfg.schedule_policy not in {"default", "estimator", "nutch", "uniform", "oracle"}:
        raise ConfigError(f"schedule_policy: must be default, estimator, nutch, uniform or oracle, "
                          f"got {cfg.schedule_policy!r}")
    if cfg.schedule_policy == "oracle" and not cfg.oracle_rates_path:
        raise ConfigError("oracle_rates_path: required when schedule_policy is oracle")
    if cfg.politeness_key not in {"host", "domain", "ip"}:
        raise ConfigError(f"politeness_key: must be host, domain or ip, got {cfg.politeness_key!r}")
    if not is_crawl_id(cfg.crawl_id):
        raise ConfigError(
            f"crawl_id: must match {CRAWL_ID_RE.pattern} (lowercase letters, digits, _ and -), "
            f"got {cfg.crawl_id!r}"
        )
    if not cfg.user_agent.strip():
        raise ConfigError("user_agent: must not be empty")
    if not re.fullmatch(r"[A-Za-z_-]+", cfg.robots_agent):
        raise ConfigError(f"robots_agent: must be a product token of letters, _ and -, got {cfg.robots_agent!r}")
    if not cfg.root:
        raise ConfigError("root: must not be empty")
    try:
        compile_allowed_hosts(cfg.allowed_hosts)
    except ScopeError as exc:
        raise ConfigError(f"allowed_hosts: {exc}") from None
    for rule in cfg.resolve:
        if not _RESOLVE_RE.match(rule):
            raise ConfigError(f"resolve: expected 'PATTERN=IP:PORT', got {rule!r}")
    if any(s <= 0 for s in cfg.retry_schedule_s):
        raise ConfigError("retry_schedule_s: every wait must be > 0")


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    use_env: bool = True,
) -> CrawlConfig:
    """Build a validated config from defaults < YAML file < ``CRAWL_*`` env < overrides.

    ``None`` values in ``overrides`` mean "not given" (so unset CLI flags fall through).
    """
    hints = get_type_hints(CrawlConfig)
    known = {f.name for f in fields(CrawlConfig)}
    values: dict[str, Any] = {}
    if path is not None:
        text = Path(path).read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path}: not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path}: expected a mapping of keys to values")
        for key, value in data.items():
            if key not in known:
                raise ConfigError(f"{key}: unknown config key (in {path})")
            values[key] = _coerce(key, hints[key], value)
    if use_env:
        for key in known:
            env = os.environ.get(f"CRAWL_{key.upper()}")
            if env is not None:
                values[key] = _coerce(key, hints[key], env)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in known:
            raise ConfigError(f"{key}: unknown config key")
        values[key] = _coerce(key, hints[key], value)
    cfg = CrawlConfig(**values)
    _validate(cfg)
    return cfg


def default_config_path() -> Path:
    """The documented defaults shipped with the project."""
    return Path(__file__).resolve().parent.parent / "include" / "config" / "crawl.yaml"


__all__ = [
    "CRAWL_ID_RE", "ConfigError", "is_crawl_id", "CrawlConfig", "DEFAULT_USER_AGENT", "PRODUCT_TOKEN",
    "default_config_path", "load_config",
]
