FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY pyproject.toml README.md alembic.ini ./
COPY service ./service
COPY dashboards ./dashboards
COPY migrations ./migrations
RUN pip install --no-cache-dir .
EXPOSE 8000
CMD ["cachewatch", "serve", "--host", "0.0.0.0", "--port", "8000"]
