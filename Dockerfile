# The operator's image: Python, the Java runtime Spark needs for the in-process aggregation, the
# dependencies pinned in requirements.lock (what the daemon and the CLI run: not the benchmark's plots,
# which are the `bench` extra), and a non-root user. `operator run` is the entrypoint; the
# Helm chart passes `--config /etc/pulsar-lb-operator/settings.yaml`.
#   docker build -t pulsar-lb-operator .
FROM python:3.11.7-slim-bookworm

# /metrics and the probes listen on every interface in a container (metricsHost is 127.0.0.1 for local runs).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PULSAR_LB_METRICS_HOST=0.0.0.0

# Debian's JRE 17 for PySpark, and procps: Spark's launch scripts call ps. The man directory must
# exist for the JRE's post-install step on slim images.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless=17.0.* procps=2:4.0.* \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 pulsar-lb \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/pulsar-lb-operator \
       --shell /usr/sbin/nologin pulsar-lb \
    && mkdir -p /var/lib/pulsar-lb-operator /etc/pulsar-lb-operator \
    && chown 10001:10001 /var/lib/pulsar-lb-operator

WORKDIR /app
# Dependencies first, in their own layer: a code change does not reinstall them.
COPY requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock
COPY pyproject.toml setup.py README.md ./
COPY operator ./operator
COPY strategies ./strategies
COPY simulator ./simulator
COPY spark_jobs ./spark_jobs
COPY benchmarks ./benchmarks
RUN pip install --no-cache-dir --no-deps . && pip check

USER 10001:10001
WORKDIR /var/lib/pulsar-lb-operator
EXPOSE 8090
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PULSAR_LB_METRICS_PORT', '8090'), timeout=4)"]
ENTRYPOINT ["operator", "run"]
CMD ["--config", "/etc/pulsar-lb-operator/settings.yaml"]
