FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The migrations (Alembic's and ClickHouse's) are package data under service/:
# the installed package carries them, whatever the working directory.
COPY pyproject.toml README.md ./
COPY service ./service
COPY dashboards ./dashboards
RUN pip install --no-cache-dir . && rm -rf /app/service /app/dashboards
EXPOSE 8000
CMD ["cachewatch", "serve", "--host", "0.0.0.0", "--port", "8000"]
