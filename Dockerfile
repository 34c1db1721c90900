# blockbatch image: the Temporal worker (default), the simulated Claude and the starter CLI.
#
#   docker build -t blockbatch:local .
#   docker run --rm blockbatch:local                          # python worker.py
#   docker run --rm blockbatch:local python -m blockbatch.simulator --host 0.0.0.0 --port 8765
#   docker run --rm -it blockbatch:local python starter.py --help
#
# Configuration comes only from the environment (DATABASE_URL, TEMPORAL_ADDRESS,
# ANTHROPIC_API_KEY, ...; see docker-compose.yml). No secret is baked into the image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

# Unprivileged runtime user with a fixed uid/gid (predictable for volume permissions).
RUN groupadd --system --gid 10001 blockbatch \
 && useradd --system --uid 10001 --gid blockbatch --create-home \
      --home-dir /home/blockbatch --shell /usr/sbin/nologin blockbatch

WORKDIR /app

# Dependencies first, in their own layer: rebuilt only when pyproject.toml changes, not on
# every source edit. The list is read from pyproject.toml itself, so it cannot drift.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# The project itself (what .dockerignore lets through: no .venv, .git, .data, .env, ...).
COPY . .
RUN pip install --no-cache-dir . \
 && rm -rf build ./*.egg-info \
 && python -c "import blockbatch.core, blockbatch.store, blockbatch.simulator, activities, workflows" \
 && install -d -o blockbatch -g blockbatch /var/lib/blockbatch

# Anything a process writes locally goes here, not into the (root-owned) source tree.
ENV BLOCKBATCH_DATA_DIR=/var/lib/blockbatch

USER blockbatch:blockbatch

# The simulator listens here when run as such; the worker opens no port.
EXPOSE 8765

# The worker handles SIGTERM: it stops polling and lets in-flight activities finish
# (give it time: docker-compose.yml sets stop_grace_period).
STOPSIGNAL SIGTERM
CMD ["python", "worker.py"]
