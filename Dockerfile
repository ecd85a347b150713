# Minimal image of the operator. Issue 7 adds the Java runtime Spark needs for in-process aggregation
# (without it, set aggregateEveryMinutes: 0 and run the job with spark-submit), pinned dependencies,
# the daemon entrypoint and a HEALTHCHECK. Not built here: this machine has no Docker engine.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY strategies ./strategies
COPY simulator ./simulator
COPY spark_jobs ./spark_jobs
RUN pip install --no-cache-dir . && useradd --uid 10001 --no-create-home operator
USER 10001
ENTRYPOINT ["operator"]
CMD ["--help"]
