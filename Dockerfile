# One image for every service of docker-compose.yaml: the Airflow components (api-server, scheduler,
# dag-processor, triggerer, init) and the Dask scheduler and workers. Sharing one image is what makes
# Dask safe here: workers unpickle functions from the `crawl` package, so they must run exactly the
# code (and library versions) the Airflow tasks submit.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AIRFLOW_HOME=/opt/airflow \
    PYTHONPATH=/opt/recrawl

WORKDIR /opt/recrawl

# Dependencies first (own layer, cached until the requirements change). The lock is used as a
# constraints file so the image resolves to exactly the versions CI tested (the PostgreSQL drivers
# psycopg2-binary and asyncpg that Airflow 3 needs for its metadata DB are in requirements.txt).
COPY requirements.txt requirements.lock ./
RUN pip install -r requirements.txt -c requirements.lock

# /opt/airflow/numba-cache: NUMBA_CACHE_DIR of docker-compose.yaml, made here and owned by the airflow user
# so the named volume mounted on it starts out writable (compose copies the image's directory into a new volume).
RUN useradd --create-home --uid 50000 --gid 0 airflow \
 && mkdir -p /opt/airflow/logs /opt/airflow/auth /opt/airflow/numba-cache \
 && chown -R 50000:0 /opt/airflow

COPY pyproject.toml ./
COPY crawl/ ./crawl/
COPY dags/ ./dags/
COPY plugins/ ./plugins/
COPY include/ ./include/
# Bytecode of our own code now: PYTHONDONTWRITEBYTECODE keeps every process from writing it, so without this
# each Airflow task process and Dask worker compiled crawl/ from source as it started (~0.3 s of CPU for the
# package; pip already compiled the dependencies'): bench/RESULTS.md, "session 15, helper small15".
RUN python -m compileall -q crawl dags plugins

USER 50000
EXPOSE 8080 8786 8787
CMD ["airflow", "version"]
