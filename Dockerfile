FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The migrations (Alembic's and ClickHouse's, in migrations/) are package data:
# service/migrations links to them, the wheel copies them, and the installed
# package carries them, whatever the working directory.
# The client (clients/python) is its own distribution, which the service depends on.
COPY pyproject.toml README.md ./
COPY clients ./clients
COPY service ./service
COPY migrations ./migrations
COPY dashboards ./dashboards
RUN pip install --no-cache-dir ./clients/python . \
 && rm -rf /app/clients /app/service /app/migrations /app/dashboards
EXPOSE 8000
CMD ["cachewatch", "serve", "--host", "0.0.0.0", "--port", "8000"]
