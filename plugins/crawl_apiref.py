"""The crawl API's reference as one server-rendered HTML page, built from the app's own ``openapi()``.

Why not Swagger UI / ReDoc: FastAPI's pages load their JavaScript and CSS from cdn.jsdelivr.net, so on a
machine or cluster without internet access they stay blank. This page needs no script and nothing from
elsewhere: every path and method with its summary and description, parameters (where, type, bounds,
required), request body fields and responses, read from the same OpenAPI schema ``/crawl/openapi.json``
serves (so it cannot drift from the API).
"""

from __future__ import annotations

import re
from typing import Any

METHODS = ("get", "post", "put", "patch", "delete")
_BOUNDS = (("minimum", "≥ {}"), ("exclusiveMinimum", "> {}"), ("maximum", "≤ {}"), ("exclusiveMaximum", "< {}"),
           ("minLength", "length ≥ {}"), ("maxLength", "length ≤ {}"), ("minItems", "items ≥ {}"),
           ("maxItems", "items ≤ {}"), ("pattern", "matches {}"))


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        return spec.get("components", {}).get("schemas", {}).get(ref.rsplit("/", 1)[1], {})
    return schema if isinstance(schema, dict) else {}


def type_text(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    """'integer', 'string or null', 'array of string', 'CrawlRequest' ..."""
    if not isinstance(schema, dict):
        return ""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[1]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(dict.fromkeys(type_text(s, spec) for s in schema[key]))
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    kind = schema.get("type", "")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"array of {type_text(schema.get('items', {}), spec) or 'any'}"
    return str(kind or "any")


def constraints(schema: dict[str, Any]) -> str:
    """The bounds of a schema (and of each alternative of an anyOf), e.g. '≥ 1, ≤ 5000'."""
    out: list[str] = []
    for s in [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]:
        if not isinstance(s, dict):
            continue
        out += [fmt.format(s[key]) for key, fmt in _BOUNDS if key in s]
        if s.get("type") == "array" and isinstance(s.get("items"), dict):
            inner = constraints(s["items"])
            out += [f"each {inner}"] if inner else []
    return ", ".join(dict.fromkeys(out))


def _field(name: str, schema: dict[str, Any], required: bool, spec: dict[str, Any], where: str = "") -> dict[str, Any]:
    return {
        "name": name, "in": where, "required": required, "type": type_text(schema, spec),
        "constraints": constraints(schema), "default": repr(schema["default"]) if "default" in schema else "",
        "description": str(schema.get("description") or schema.get("title") or ""),
    }


def anchor(method: str, path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", f"{method}-{path}".lower()).strip("-")


def operations(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every operation of an OpenAPI 3.x schema, in path order, as plain rows for a template."""
    ops = []
    for path, item in spec.get("paths", {}).items():
        for method in METHODS:
            op = item.get(method)
            if not op:
                continue
            params = [_field(p["name"], p.get("schema", {}), bool(p.get("required")), spec, p.get("in", ""))
                      | ({"description": p["description"]} if p.get("description") else {})
                      for p in op.get("parameters", [])]
            body = None
            content = (op.get("requestBody") or {}).get("content", {})
            for media, c in content.items():
                schema = c.get("schema", {})
                model = _resolve(schema, spec)
                required = set(model.get("required", []))
                body = {"media": media, "type": type_text(schema, spec), "description": str(model.get("description") or ""),
                        "required": bool((op.get("requestBody") or {}).get("required")),
                        "fields": [_field(n, s, n in required, spec) for n, s in model.get("properties", {}).items()]}
                break
            responses = [{"code": code, "description": str(r.get("description") or ""),
                          "media": ", ".join(r.get("content", {}))}
                         for code, r in op.get("responses", {}).items()]
            ops.append({"method": method.upper(), "path": path, "anchor": anchor(method, path),
                        "summary": str(op.get("summary") or ""), "description": str(op.get("description") or ""),
                        "tags": op.get("tags", []), "parameters": params, "body": body, "responses": responses})
    return ops


__all__ = ["anchor", "constraints", "operations", "type_text"]
