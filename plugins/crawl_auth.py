"""Who may do what in the crawl API: Airflow's own auth manager decides, asked about the ``recrawl`` DAG.

A crawl is the ``recrawl`` DAG's data, so its permissions are the DAG's: reading crawls, pages and
bodies needs read access to the DAG; starting a crawl needs the right to create a run of it (the
same check Airflow's ``POST /api/v2/dags/{dag_id}/dagRuns`` makes). The checks are Airflow's FastAPI
dependencies from ``airflow.api_fastapi.core_api.security``:

* ``requires_access_dag(method, access_entity, param_dag_id)`` resolves the caller (Bearer token or the
  UI's ``_token`` cookie; 401 without one, 403 for a forged one) and asks
  ``get_auth_manager().is_authorized_dag(method=..., access_entity=..., details=DagDetails(id=...))``,
  answering 403 "Forbidden" when the auth manager says no. So whatever auth manager the deployment
  configures (simple, FAB, Keycloak, ...) and its roles apply; with the simple auth manager a
  ``VIEWER`` may read and a ``USER`` or above may trigger.
* ``requires_authenticated()``: a login, no particular permission (the OpenAPI docs).

Use them as route ``dependencies=[...]``: FastAPI runs a route's declared dependencies before it
validates the request body and before the endpoint runs, so nothing (config loading, seed checks, the
``allowed_hosts`` pattern) is done for a caller who may not do it.
"""

from __future__ import annotations

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag, requires_authenticated
from fastapi import Depends

DAG_ID = "recrawl"

#: read access to the recrawl DAG (crawls, counts, pages, stored bodies, the summary page)
CAN_READ = Depends(requires_access_dag(method="GET", param_dag_id=DAG_ID))
#: may create a run of the recrawl DAG (start a crawl)
CAN_TRIGGER = Depends(requires_access_dag(method="POST", access_entity=DagAccessEntity.RUN, param_dag_id=DAG_ID))
#: any logged-in user (the API's own documentation)
LOGGED_IN = Depends(requires_authenticated())

__all__ = ["CAN_READ", "CAN_TRIGGER", "DAG_ID", "LOGGED_IN"]
