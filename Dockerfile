# allot: the scheduler core, simulator and audit as one image.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY allot ./allot
COPY events ./events
COPY projections ./projections
COPY scheduler ./scheduler
COPY simulator ./simulator
COPY audit ./audit
COPY streams ./streams
COPY scenarios ./scenarios
RUN pip install --no-cache-dir .
ENTRYPOINT ["allot"]
CMD ["--help"]
