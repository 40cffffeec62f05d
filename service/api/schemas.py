"""Answer shapes, so the OpenAPI schema tells clients exactly what comes back."""

from pydantic import BaseModel


class RecordError(BaseModel):
    index: int
    request_id: str | None
    error: str


class IngestAnswer(BaseModel):
    accepted: int
    duplicates: int
    rejected: int
    errors: list[RecordError]


class ErrorAnswer(BaseModel):
    error: str


class EventOut(BaseModel):
    id: int
    ts: str
    service: str
    kind: str
    model: str | None
    deploy: str | None
    replicas: int | None
    description: str | None
    source: str


class RejectedOut(BaseModel):
    id: int
    received_at: str
    endpoint: str
    index: int | None
    request_id: str | None
    reason: str
    raw: str
    raw_encoding: str


class Health(BaseModel):
    status: str
    database: str
