# Buildbay's server image: the locked dependencies in a virtual environment, run as non-root.
# docker build -t buildbay . ; settings are BUILDBAY_* environment variables (docs/operations.md).

# A Python with the fix for CVE-2024-6923 (e-mail header folding; docs/operations.md, "Mail
# safety"). Buildbay's own mail code holds without it, on the 3.11 that requires-python allows.
FROM python:3.13.9-slim AS build
RUN pip install --no-cache-dir uv==0.13.9
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY src ./src
# The `buildbay` command is the client's (a workspace member); the server adds `serve` to it.
COPY client ./client
# Exactly uv.lock's versions, without the development tools; the projects themselves not
# editable; compiled to bytecode here, since the image runs with PYTHONDONTWRITEBYTECODE.
RUN UV_PROJECT_ENVIRONMENT=/venv uv sync --locked --no-dev --no-editable --compile-bytecode \
    --python /usr/local/bin/python3

FROM python:3.13.9-slim
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home buildbay \
    && mkdir /data && chown buildbay:buildbay /data
COPY --from=build /venv /venv
ENV PATH=/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    BUILDBAY_DATA_DIR=/data
USER buildbay
WORKDIR /data
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
CMD ["buildbay", "serve", "--host", "0.0.0.0", "--port", "8000"]
