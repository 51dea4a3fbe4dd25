# allot: the scheduler core, simulator and audit as one image.
#
# The first stage compiles the core with mypyc (native/; it needs a C compiler
# and the Python headers, which the slim image lacks); the runtime image takes
# the compiled modules and insists on them (ALLOT_CORE=native: a build that does
# not load stops the process with the reason instead of running slower).
# Both stages install the same sources (the first stage's copy) with pip, so
# the compiled modules' manifest matches the installed files byte for byte.
FROM python:3.11 AS native
WORKDIR /src
COPY pyproject.toml README.md ./
COPY allot ./allot
COPY events ./events
COPY projections ./projections
COPY scheduler ./scheduler
COPY simulator ./simulator
COPY audit ./audit
COPY streams ./streams
COPY native ./native
RUN pip install --no-cache-dir '.[native]'
# Run from outside /src so the installed packages (not the copies here) are compiled and hashed.
WORKDIR /
RUN ALLOT_CORE_DIR=/opt/allot-core python -m native.build

FROM python:3.11-slim
WORKDIR /app
COPY --from=native /src ./
COPY scenarios ./scenarios
RUN pip install --no-cache-dir .
COPY --from=native /opt/allot-core /opt/allot-core
ENV ALLOT_CORE=native ALLOT_CORE_DIR=/opt/allot-core
ENTRYPOINT ["allot"]
CMD ["--help"]
