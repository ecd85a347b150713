# Minimal image of the operator's CLI. Issue 7 adds the Java runtime for Spark, pinned dependencies,
# the daemon entrypoint and a HEALTHCHECK.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY strategies ./strategies
RUN pip install --no-cache-dir . && useradd --uid 10001 --no-create-home operator
USER 10001
ENTRYPOINT ["operator"]
CMD ["--help"]
