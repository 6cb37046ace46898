"""The one typed crawl configuration, and the one declaration of the settings a user gives a crawl.

Every external limit has a default here (timeouts, body size, redirects, URL length, depth, pages per
host) so that no component invents its own. Values come, in increasing precedence, from the dataclass
defaults, a YAML file (``include/config/crawl.yaml`` documents each key), environment variables
``CRAWL_<KEY>`` and explicit overrides (CLI flags, DAG params). An invalid value raises
:class:`ConfigError` naming the key, before anything is written.

:class:`CrawlSettings` declares the user-facing subset (crawl id, seeds, budgets, politeness, depth,
coverage share, scope) once, with titles, descriptions, bounds and defaults. The DAG's trigger-form
Params (:func:`param_specs`), the crawl API's request model (:func:`request_model`) and the CLI flags
(:func:`cli_flag_specs`) are derived from it, and :class:`CrawlConfig` takes those keys' defaults and
bounds from it, so the four can never disagree.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Optional, get_type_hints

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    create_model,
)

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
#: The URL schemes the engine can fetch; a crawl's ``allowed_schemes`` is a subset (ftp is opt-in).
KNOWN_SCHEMES: tuple[str, ...] = ("http", "https", "ftp")


def is_crawl_id(value: object) -> bool:
    """True for a valid crawl id: the whole string matches :data:`CRAWL_ID_RE` (no trailing newline)."""
    return isinstance(value, str) and CRAWL_ID_RE.fullmatch(value) is not None


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""


def _valid_scope(value: str) -> str:
    """``allowed_hosts`` must compile on RE2, the engine that runs it (crawl.scope)."""
    try:
        compile_allowed_hosts(value)
    except ScopeError as exc:
        raise ValueError(str(exc)) from None
    return value


_RENDER_GLOB_RE = re.compile(r"^[a-z0-9*?.\[\]!_-]+$")


def render_globs(value: str) -> tuple[str, ...]:
    """The glob patterns of a ``render_hosts`` value (comma or whitespace separated, lower-cased)."""
    return tuple(p for p in re.split(r"[,\s]+", value.strip().lower()) if p)


def render_enabled(cfg: CrawlConfig) -> bool:
    """Does this crawl render anything (so the round runs render tasks)? Here, not in :mod:`crawl.render`:
    the driver asks every round, and importing that module (aiohttp and its TLS contexts, selectolax, the
    browser plumbing: ~0.2 s of CPU) was the only reason the driver of a crawl that renders nothing had it,
    in round 1 before its fetch tasks were submitted."""
    return bool(render_globs(cfg.render_hosts)) or cfg.render_auto


def _valid_render_hosts(value: str) -> str:
    """``render_hosts``: host globs (letters, digits, ``. - _ * ? [ ] !``), at most 100 of them."""
    globs = render_globs(value)
    bad = [g for g in globs if not _RENDER_GLOB_RE.match(g)]
    if bad:
        raise ValueError(f"not a host glob: {bad[0]!r} (letters, digits, . - _ and the wildcards * ? [])")
    if len(globs) > 100:
        raise ValueError(f"at most 100 patterns, got {len(globs)}")
    return value


class CrawlSettings(BaseModel):
    """The settings a user gives a crawl, declared once (pydantic: typed, with JSON-schema bounds).

    ``seeds`` is what inject takes; every other field is a :class:`CrawlConfig` key of the same name
    (so a value travels from the trigger form, the API or a flag to the engine without a mapping).
    Everything else in the config is deployment or tuning (crawl root, Dask, timeouts, traps) and is
    set by YAML, ``CRAWL_*`` env or ``--set``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    crawl_id: str = Field(
        "demo", pattern=CRAWL_ID_RE.pattern, title="Crawl id",
        description="Name of the crawl: lowercase letters, digits, _ and - (at most 63); one folder per id "
                    "under the crawl root.")
    seeds: list[Annotated[str, StringConstraints(min_length=1)]] = Field(
        min_length=1, title="Seed URLs",
        description="http(s) URLs to start from, one per line; injected when given or when the crawl is new.")
    max_pages: int = Field(
        1000, ge=1, title="Max pages per round", description="Fetch budget of one round, all hosts together.")
    max_pages_per_host_per_round: int = Field(
        0, ge=0, title="Max pages per host per round",
        description="0 = derived from the round duration and the host's delay (its robots Crawl-delay or the "
                    "politeness delay).")
    round_duration_s: float = Field(
        3600.0, gt=0, title="Round duration (s)",
        description="Time a round may take; bounds the per-host caps and the fetch deadline.")
    politeness_delay_s: float = Field(
        1.0, ge=0, title="Politeness delay (s)", description="Minimum gap between two request starts to one host.")
    max_depth: int = Field(15, ge=0, title="Max depth", description="Link hops from a seed.")
    coverage_share: float = Field(
        0.3, ge=0, le=1, title="Coverage share",
        description="Share of the round budget reserved for never-fetched URLs (0 to 1).")
    allowed_hosts: Annotated[str, AfterValidator(_valid_scope)] = Field(
        "", title="Allowed hosts", description="Regular expression a host must match (scope); empty = any host.")
    render_hosts: Annotated[str, AfterValidator(_valid_render_hosts)] = Field(
        "", title="Render hosts (JavaScript)",
        description="Glob patterns of hosts whose pages are rendered in a headless browser after the fetch "
                    "(comma or space separated, e.g. 'spa-*.example.com app.example.org'); empty = only pages "
                    "that look script-built, when render_auto is on.")


#: The settings that are config keys (all but seeds), in declaration order.
SETTING_KEYS: tuple[str, ...] = tuple(k for k in CrawlSettings.model_fields if k != "seeds")
#: Settings an API request must give (the rest fall back to the deployment's config).
REQUIRED_IN_REQUEST: tuple[str, ...] = ("crawl_id", "seeds")


def setting_default(name: str) -> Any:
    """The declared default of a setting (seeds have none: the caller must give them)."""
    return CrawlSettings.model_fields[name].get_default(call_default_factory=True)


def setting_type(name: str) -> Any:
    """The setting's type with its constraints (bounds, pattern, validators) attached."""
    info = CrawlSettings.model_fields[name]
    return Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation


def describe(name: str) -> str:
    """The help text every derivation shows: the declared description plus what "not given" means."""
    info = CrawlSettings.model_fields[name]
    if name == "seeds":
        return info.description or ""
    return f"{info.description} Default: {json.dumps(setting_default(name))}."


def setting_schema(name: str) -> dict[str, Any]:
    """The setting's JSON schema (type, bounds, pattern, items) without title/description/default."""
    prop = dict(CrawlSettings.model_json_schema()["properties"][name])
    for key in ("title", "description", "default"):
        prop.pop(key, None)
    return prop


def seed_pattern(schemes: Iterable[str] = KNOWN_SCHEMES) -> str:
    """A JSON-schema ``pattern`` that every seed :func:`crawl.round.validate_seeds` accepts matches.

    It is the part of the engine's seed rule a schema can say: optional surrounding whitespace (the
    engine strips it), a scheme among ``schemes`` in any case, ``:``, optional slashes (the engine reads
    ``http:example.com`` and ``http:/example.com`` as ``http://example.com/``), then at least one
    character that is not a slash, and no whitespace inside. It refuses 'example.org' (no scheme),
    'htp://x', two URLs on one line, an empty line and 'http://'. The rest of the rule (host and port
    parse, length, URL filters, private addresses) stays in validate_seeds, at inject.

    Airflow 3.3 checks it on the API server only (jsonschema, Python ``re``), where ``\\s`` is exactly
    ``str.isspace`` (what validate_seeds strips and refuses). The syntax is ECMAScript's too (no inline
    flags: case is spelled ``[Hh]``), and a browser reads it alike except that its ``\\s`` lacks
    U+001C-U+001F and has U+FEFF (tests/test_settings.py checks both). ``\\s`` rather than an exact
    class keeps the pattern short: Airflow prints it in the refusal.
    """
    alts = "|".join("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in s)
                    for s in schemes)
    return rf"^\s*(?:{alts}):[/\\]*[^\s/\\]\S*\s*$"


def seed_item_description(schemes: Iterable[str] = KNOWN_SCHEMES) -> str:
    """What the form's seed pattern means, in words (jsonschema prints it with a refused seed)."""
    return (f"each line one URL starting with {' or '.join(f'{s}:' for s in schemes)}, "
            "then its host; no spaces (write a space inside a URL as %20), no empty lines")


def param_specs(seeds_default: list[str], crawl_id_default: str | None = None,
                seed_schemes: Iterable[str] = KNOWN_SCHEMES) -> dict[str, dict[str, Any]]:
    """Keyword arguments of the DAG's ``Param`` objects (``Param(**spec)``), derived from the declaration.

    The engine never imports Airflow, so this returns plain dicts. Settings other than crawl id and seeds
    default to ``None`` with a nullable type: the trigger form then submits with its defaults (an empty
    optional field is not "missing"), and "not given" lets the deployment's ``CRAWL_*`` env apply.

    Seeds get :func:`seed_pattern` on their items (``seed_schemes``: the deployment's ``allowed_schemes``),
    so Airflow refuses a trigger with a seed the engine would refuse for its form (no scheme, a scheme not
    allowed, whitespace inside, an empty line) before it creates the run: the REST trigger answers 400
    naming the seed. Only the Params get it: the crawl API keeps the engine's own messages (SeedError).
    """
    specs: dict[str, dict[str, Any]] = {}
    for name, info in CrawlSettings.model_fields.items():
        schema = setting_schema(name)
        spec: dict[str, Any] = {"title": info.title, "description": describe(name)}
        if name == "seeds":
            schemes = tuple(seed_schemes)
            schema["items"] = {**schema.get("items", {}), "pattern": seed_pattern(schemes),
                               "description": seed_item_description(schemes)}
            spec.update(default=list(seeds_default), **schema)
        elif name == "crawl_id":
            spec.update(default=crawl_id_default or setting_default(name), **schema)
        else:
            spec.update(default=None, **{**schema, "type": ["null", schema["type"]]})
        specs[name] = spec
    return specs


def request_model(name: str = "CrawlRequest", doc: str | None = None,
                  extra_fields: dict[str, Any] | None = None) -> type[BaseModel]:
    """A pydantic model for an API request: crawl id and seeds required, the other settings optional.

    An omitted (``None``) optional setting means "the deployment's config"; unknown fields are refused
    (422), so a typo is not silently ignored. ``extra_fields`` (name -> (type, Field)) adds fields that
    are not crawl settings (the API's ``dask_address``).
    """
    fields: dict[str, Any] = {}
    for key, info in CrawlSettings.model_fields.items():
        if key in REQUIRED_IN_REQUEST:
            fields[key] = (setting_type(key), Field(title=info.title, description=describe(key)))
        else:
            fields[key] = (Optional[setting_type(key)], Field(None, title=info.title, description=describe(key)))  # noqa: UP045
    fields.update(extra_fields or {})  # request-only fields that are not crawl settings
    return create_model(name, __config__=ConfigDict(extra="forbid"),
                        __doc__=doc or "The settings of a crawl to start (see crawl.config.CrawlSettings).", **fields)


def cli_flag_specs() -> dict[str, dict[str, Any]]:
    """``argparse`` arguments for the settings that are config keys: ``--max-pages`` etc.

    Flags default to ``None`` ("not given", so YAML and env apply); bounds are checked by
    :func:`load_config`, which names the key. Seeds are per-command (``--seeds``) and not listed here.
    """
    specs = {}
    for key in SETTING_KEYS:
        info = CrawlSettings.model_fields[key]
        specs[key] = {"flag": "--" + key.replace("_", "-"), "type": info.annotation, "dest": key,
                      "default": None, "help": f"{info.title}: {describe(key)}"}
    return specs


_SETTINGS_VALIDATOR = create_model(
    "CrawlSettingsKeys", __config__=ConfigDict(strict=False),
    **{k: (setting_type(k), Field(...)) for k in SETTING_KEYS})


@dataclass(frozen=True)
class CrawlConfig:
    """Every key of a crawl's configuration; the user-facing ones take defaults from CrawlSettings."""

    # identity and storage
    crawl_id: str = setting_default("crawl_id")
    root: str = "crawldata"
    user_agent: str = DEFAULT_USER_AGENT
    robots_agent: str = PRODUCT_TOKEN

    # round budget and frontier
    max_pages: int = setting_default("max_pages")
    max_pages_per_host: int = 100_000
    max_pages_per_host_per_round: int = setting_default("max_pages_per_host_per_round")
    round_duration_s: float = setting_default("round_duration_s")
    coverage_share: float = setting_default("coverage_share")
    schedule_policy: str = "default"  # default | estimator | nutch | uniform | oracle (crawl.schedule)
    oracle_rates_path: str = ""  # Parquet (url, change_rate per day) for the oracle policy (benchmarks)
    partitions: int = 2  # one fetch task per worker: see include/config/crawl.yaml
    url_shards: int = 4
    # reprioritise work that grows with the whole crawl runs every N rounds (crawl.schedule); in between,
    # rows keep their importance (new URLs get one PageRank step over the round's own links) and the
    # last fitted prior predicts
    importance_every_rounds: int = 1
    prior_every_rounds: int = 1
    politeness_key: str = "host"  # host | domain | ip

    # politeness
    politeness_delay_s: float = setting_default("politeness_delay_s")
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
    # a fetch task's progress is checkpointed (crawl.checkpoint) every N rows or S seconds, whichever
    # comes first, so a retry or rerun fetches only what is missing; both 0: no checkpoints
    fetch_checkpoint_every: int = 500
    fetch_checkpoint_s: float = 30.0
    # the fetch task parses its partition from the bodies it keeps in memory, up to this many bytes
    # (the rest are read back from its WARC files); 0 = a separate parse task reads them all back.
    # Partitions that may be rendered (render_auto, or a host in render_hosts) parse in a separate task,
    # after the render task.
    parse_in_fetch_max_bytes: int = 268_435_456
    parse_overlap_docs: int = 0  # parse in the fetch task: held documents parsed on a side thread during the fetch, paced by the fetch loop's lag (crawl.parse_ahead), this many a chunk (64 measured); 0 = after the fetch (default: with the warm simulated web there is no slack to fill, +5 % CPU, bench/RESULTS.md "Round-end parse at scale")

    # per-request limits
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 15.0
    total_timeout_s: float = 30.0
    max_body_bytes: int = 2_000_000
    max_redirects: int = 5
    max_url_length: int = 2048
    # URL schemes crawled: http and https; add "ftp" to crawl FTP servers too (opt-in, crawl/ftp.py)
    allowed_schemes: tuple[str, ...] = ("http", "https")

    # parsing (crawl.parse, crawl.media)
    parsers: tuple[str, ...] = ()  # extra parsers, 'module:function' (decorated with crawl.parse.parser)
    pdf_max_bytes: int = 20_000_000  # a bigger PDF is stored but not parsed
    pdf_max_pages: int = 200  # text and links from at most this many pages of a PDF
    pdf_max_seconds: float = 10.0  # text extraction of one PDF stops at the next page after this

    # traps and scope
    max_depth: int = setting_default("max_depth")
    max_path_repeats: int = 2
    max_path_segments: int = 20
    max_query_params: int = 8
    max_outlinks_per_page: int = 500
    allowed_hosts: str = setting_default("allowed_hosts")
    tracking_params: tuple[str, ...] = DEFAULT_TRACKING_PARAMS

    # retries of transient failures (seconds until the next try; after the last try: gone)
    retry_schedule_s: tuple[float, ...] = (3600.0, 21_600.0, 86_400.0)
    # a stored page is due again at most this long after its last fetch, however rarely it seems to change
    # (Nutch's db.fetch.interval.max, 90 days): a page that never changed is still checked now and then
    max_refetch_interval_s: float = 90 * 86_400.0

    # dedup
    bloom_fp_rate: float = 0.01
    bloom_expected_urls: int = 1_000_000
    simhash_max_distance: int = 3

    # network
    resolve: tuple[str, ...] = ()  # 'PATTERN=IP:PORT', e.g. '*.sim.test=127.0.0.1:8800'
    allow_private_networks: bool = False  # connect to loopback/private/reserved addresses (SSRF guard off)
    verify_tls: bool = True  # verify TLS certificates; false only for test servers with self-signed ones

    # JavaScript rendering (crawl.render): chosen hosts and pages that look script-built
    render_hosts: str = setting_default("render_hosts")
    render_auto: bool = False  # also render pages the heuristic calls script-built (crawl.render.looks_script_built)
    render_concurrency: int = 2  # pages one render task renders at once (one browser per task)
    render_timeout_s: float = 20.0  # per page: load, scripts and their requests
    render_max_requests: int = 50  # browser requests per page that may reach the network (the page itself excluded)
    render_min_words: int = 60  # the heuristic's "little text": fewer visible words than this
    render_same_site: bool = False  # also allow the page's registered domain (else its own host only)
    render_resource_types: tuple[str, ...] = ("document", "script", "xhr", "fetch")  # others are blocked
    chromium_path: str = "/usr/bin/chromium"  # Debian's chromium (make chromium); Playwright drives it

    # Dask
    dask_address: str = ""  # empty = embedded LocalCluster
    dask_workers: int = 2
    dask_dashboard: bool = True  # the embedded LocalCluster's dashboard (bokeh), URL printed by `crawl run`
    dask_dashboard_port: int = 0  # its port on 127.0.0.1; 0 = any free port
    dask_wait_for_workers_s: float = 60.0  # no worker on the scheduler within this wait: the round fails

    # one round at a time per crawl (crawl.lease) and the health gate of a round
    lease_expiry_s: float = 60.0  # a lease not renewed for this long may be taken over
    degraded_host_failure_share: float = 0.5  # share of hosts with connection failures that marks a round degraded
    degraded_min_fetched_share: float = 0.5  # fetched / planned below this marks a round degraded
    degraded_fails_dag: bool = True  # a degraded round fails the DAG's publish task (else: a warning)

    def replace(self, **changes: Any) -> CrawlConfig:
        return load_config(overrides={**dataclasses.asdict(self), **changes}, use_env=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


_POSITIVE = {
    "max_pages_per_host", "partitions", "url_shards", "max_in_flight_per_host",
    "max_host_errors", "robots_max_bytes", "max_concurrent_hosts", "connect_timeout_s",
    "read_timeout_s", "total_timeout_s", "max_body_bytes", "max_url_length",
    "max_query_params", "max_outlinks_per_page", "bloom_expected_urls", "dask_workers",
    "max_path_segments", "max_sitemaps_per_host", "pdf_max_bytes", "pdf_max_pages", "pdf_max_seconds",
    "dask_wait_for_workers_s", "lease_expiry_s", "render_concurrency", "render_timeout_s",
    "importance_every_rounds", "prior_every_rounds", "max_refetch_interval_s",
}
_NON_NEGATIVE = {
    "max_crawl_delay_s", "backoff_base_s", "backoff_cap_s", "robots_ttl_s",
    "max_redirects", "max_path_repeats", "simhash_max_distance", "dask_dashboard_port",
    "render_max_requests", "render_min_words", "fetch_checkpoint_every", "fetch_checkpoint_s",
    "parse_in_fetch_max_bytes", "parse_overlap_docs",
}
# Playwright's request resource types (render_resource_types may name these)
RENDER_RESOURCE_TYPES = frozenset({"document", "stylesheet", "image", "media", "font", "script", "texttrack",
                                   "xhr", "fetch", "eventsource", "websocket", "manifest", "other", "ping"})
PARSER_SPEC_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_RESOLVE_RE = re.compile(r"^[^=\s]+=[0-9a-fA-F:.\[\]]+:\d{1,5}$")


#: The project's own environment variables that are not config keys, each with where it is read (one list;
#: ``tests/test_config_env.py`` checks every ``CRAWL_*``/``RECRAWL_*`` name the repository uses against it).
#: ``CRAWL_S3_ACCESS_KEY``/``CRAWL_S3_SECRET_KEY``: docker-compose's MinIO user of the crawler (``.env``),
#: handed to minio-init and turned into the ``AWS_*``/``FSSPEC_S3_*`` variables the storage libraries read;
#: the engine never reads them, but an operator's shell that sourced ``.env`` has them next to the keys.
#: ``RECRAWL_*``: the Airflow deployment's own settings, deliberately outside the ``CRAWL_`` prefix.
OTHER_ENV: dict[str, str] = {
    "CRAWL_KILL_PATTERN": "tests/killhook.py: kill the process group before the n-th rename matching it",
    "CRAWL_KILL_NTH": "tests/killhook.py: which matching rename (default 1)",
    "CRAWL_KILL_SIGNAL": "tests/killhook.py: the signal sent there (default SIGKILL; SIGSTOP freezes it)",
    "CRAWL_S3_ACCESS_KEY": "docker-compose.yaml: the crawler's MinIO user (.env)",
    "CRAWL_S3_SECRET_KEY": "docker-compose.yaml: the crawler's MinIO secret (.env)",
    "RECRAWL_SCHEDULE": "dags/recrawl.py: the DAG's schedule",
    "RECRAWL_TASK_RETRIES": "dags/recrawl.py: retries of every task",
    "RECRAWL_CRAWL_ID": "dags/recrawl.py: the crawl a scheduled run rounds",
    "RECRAWL_SEEDS_FILE": "dags/recrawl.py: the seeds of a new scheduled crawl",
    "RECRAWL_DASK_ADDRESSES": "crawl/cluster.py: schedulers a DAG run may name",
    "RECRAWL_AIRFLOW_API_URL": "plugins/crawl_api.py: where the crawl API reaches Airflow",
}
ENV_PREFIX = "CRAWL_"
# A name at least this similar to a key (difflib's ratio) is a misspelling of it: the typos an operator
# makes (a dropped or doubled letter, a missing unit suffix, a plural) score 0.8-0.97 against their key,
# while unrelated names score at most ~0.77 against the nearest one (TIMEOUT/read_timeout_s 0.67,
# WORKERS/dask_workers 0.74, MAX_BODY_SIZE/max_body_bytes 0.74).
_TYPO_CUTOFF = 0.8
_warned_env: set[str] = set()
log = logging.getLogger(__name__)


def did_you_mean(name: str, candidates: Iterable[str], cutoff: float = _TYPO_CUTOFF) -> str | None:
    """The candidate ``name`` most likely misspells (difflib), or None when none is that close."""
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=cutoff)
    return match[0] if match else None


def _check_env_names(environ: Mapping[str, str], known: set[str]) -> None:
    """Refuse a ``CRAWL_*`` variable that misspells a key (or a ``RECRAWL_*`` one); warn about the others.

    Why: ``load_config`` reads ``CRAWL_<KEY>`` for the keys only, so a misspelt key (PAGE for PAGES in
    ``max_pages_per_host``) was silently ignored and the crawl ran without the limit its operator set. A name close to a key (or a ``RECRAWL_*``
    variable without its ``RE``) is a :class:`ConfigError` naming the variable it probably meant, raised
    before anything runs. A ``CRAWL_*`` name close to nothing is not refused: the prefix is generic enough
    for other software to use, and refusing would stop the crawler over a variable that is none of its
    business; it is named once per process in a warning (it may also be a guess at a key's name).
    """
    for var in sorted(environ):
        if not var.startswith(ENV_PREFIX) or var in OTHER_ENV:
            continue
        rest = var[len(ENV_PREFIX):]
        if rest.lower() in known and rest == rest.upper():
            continue
        if "RE" + var in OTHER_ENV:
            raise ConfigError(f"{var} (environment): no such config key; did you mean RE{var}? "
                              f"({OTHER_ENV['RE' + var]})")
        guess = did_you_mean(rest.lower(), known)
        if guess is not None:
            raise ConfigError(f"{var} (environment): no such config key; did you mean {ENV_PREFIX}{guess.upper()}?")
        if var not in _warned_env:
            _warned_env.add(var)
            hint = did_you_mean(rest.lower(), known, cutoff=0.6)
            log.warning("ignoring %s (environment): no such config key%s; the keys are in include/config/crawl.yaml",
                        var, f" (nearest: {ENV_PREFIX}{hint.upper()})" if hint else "")


def _unknown_key(key: str, known: set[str], where: str = "") -> ConfigError:
    guess = did_you_mean(key, known)
    return ConfigError(f"{key}: unknown config key{where}" + (f"; did you mean {guess}?" if guess else ""))


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


def _validate_settings(cfg: CrawlConfig) -> None:
    """The user-facing keys against their one declaration (CrawlSettings): bounds, pattern, regex."""
    try:
        _SETTINGS_VALIDATOR.model_validate({k: getattr(cfg, k) for k in SETTING_KEYS})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if key == "crawl_id" and err["type"] == "string_pattern_mismatch":
            msg = f"must match {CRAWL_ID_RE.pattern} (lowercase letters, digits, _ and -)"
        raise ConfigError(f"{key}: {msg}, got {err.get('input')!r}") from None


def _validate(cfg: CrawlConfig) -> None:
    _validate_settings(cfg)
    for key in _POSITIVE:
        if getattr(cfg, key) <= 0:
            raise ConfigError(f"{key}: must be > 0, got {getattr(cfg, key)!r}")
    for key in _NON_NEGATIVE:
        if getattr(cfg, key) < 0:
            raise ConfigError(f"{key}: must be >= 0, got {getattr(cfg, key)!r}")
    for key in ("degraded_host_failure_share", "degraded_min_fetched_share"):
        if not 0.0 <= getattr(cfg, key) <= 1.0:
            raise ConfigError(f"{key}: must be between 0 and 1, got {getattr(cfg, key)!r}")
    if not 0.0 < cfg.bloom_fp_rate < 0.5:
        raise ConfigError(f"bloom_fp_rate: must be in (0, 0.5), got {cfg.bloom_fp_rate!r}")
    if not 0.0 <= cfg.backoff_jitter < 1.0:
        raise ConfigError(f"backoff_jitter: must be in [0, 1), got {cfg.backoff_jitter!r}")
    if cfg.schedule_policy not in {"default", "estimator", "nutch", "uniform", "oracle"}:
        raise ConfigError(f"schedule_policy: must be default, estimator, nutch, uniform or oracle, "
                          f"got {cfg.schedule_policy!r}")
    if cfg.schedule_policy == "oracle" and not cfg.oracle_rates_path:
        raise ConfigError("oracle_rates_path: required when schedule_policy is oracle")
    if not cfg.allowed_schemes or not set(cfg.allowed_schemes) <= set(KNOWN_SCHEMES):
        raise ConfigError(f"allowed_schemes: must be a non-empty list of {', '.join(KNOWN_SCHEMES)}, "
                          f"got {list(cfg.allowed_schemes)!r}")
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
    for rule in cfg.resolve:
        if not _RESOLVE_RE.match(rule):
            raise ConfigError(f"resolve: expected 'PATTERN=IP:PORT', got {rule!r}")
    for spec in cfg.parsers:
        if not PARSER_SPEC_RE.match(spec):
            raise ConfigError(f"parsers: expected 'module:function', got {spec!r}")
    unknown = [t for t in cfg.render_resource_types if t not in RENDER_RESOURCE_TYPES]
    if unknown:
        raise ConfigError(f"render_resource_types: unknown type {unknown[0]!r}, expected some of "
                          f"{', '.join(sorted(RENDER_RESOURCE_TYPES))}")
    if any(s <= 0 for s in cfg.retry_schedule_s):
        raise ConfigError("retry_schedule_s: every wait must be > 0")


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    use_env: bool = True,
) -> CrawlConfig:
    """Build a validated config from defaults < YAML file < ``CRAWL_*`` env < overrides.

    ``None`` values in ``overrides`` mean "not given" (so unset CLI flags fall through). With ``use_env``,
    a ``CRAWL_*`` variable that misspells a key is a :class:`ConfigError` (:func:`_check_env_names`).
    """
    hints = get_type_hints(CrawlConfig)
    known = {f.name for f in fields(CrawlConfig)}
    values: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path}: cannot be read: {exc}") from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path}: not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path}: expected a mapping of keys to values")
        for key, value in data.items():
            if key not in known:
                raise _unknown_key(str(key), known, f" (in {path})")
            values[key] = _coerce(key, hints[key], value)
    if use_env:
        _check_env_names(os.environ, known)
        for key in known:
            env = os.environ.get(f"CRAWL_{key.upper()}")
            if env is not None:
                values[key] = _coerce(key, hints[key], env)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in known:
            raise _unknown_key(key, known)
        values[key] = _coerce(key, hints[key], value)
    cfg = CrawlConfig(**values)
    _validate(cfg)
    return cfg


def default_config_path() -> Path:
    """The documented defaults shipped with the project."""
    return Path(__file__).resolve().parent.parent / "include" / "config" / "crawl.yaml"


__all__ = [
    "CRAWL_ID_RE", "ENV_PREFIX", "OTHER_ENV", "ConfigError", "CrawlConfig", "CrawlSettings", "DEFAULT_USER_AGENT",
    "PRODUCT_TOKEN", "did_you_mean",
    "REQUIRED_IN_REQUEST", "SETTING_KEYS", "cli_flag_specs", "default_config_path", "describe", "is_crawl_id",
    "load_config", "param_specs", "render_enabled", "render_globs", "request_model", "setting_default", "setting_schema",
    "setting_type",
]
