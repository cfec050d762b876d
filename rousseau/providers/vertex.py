"""Claude on Google Vertex AI via the Anthropic SDK's Vertex client: tools, streaming, caching."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rousseau.agent import ConfigError, MissingExtraError
from rousseau.providers.anthropic import MessagesProvider

try:
    import anthropic
    from google.auth.exceptions import GoogleAuthError
    from google.oauth2 import credentials as user_credentials
    from google.oauth2 import service_account
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the vertex provider", "vertex") from exc

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
_ADC = Path("~/.config/gcloud/application_default_credentials.json")


class VertexProvider(MessagesProvider):
    """Authenticates with a credentials file, GOOGLE_APPLICATION_CREDENTIALS or gcloud's ADC."""

    name = "vertex"
    key_hint = "check vertex.credentials_file (or GOOGLE_APPLICATION_CREDENTIALS) and its access"

    def __init__(
        self,
        *,
        model: str,
        project: str | None = None,
        region: str | None = None,
        credentials_file: str | None = None,
        max_tokens: int = 8192,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        prompt_caching: bool = True,
        vision: bool = True,
    ) -> None:
        credentials, found_project = _credentials(credentials_file)
        project = project or found_project
        if not project:
            raise ConfigError("vertex.project: not set, and the credentials name no project")
        if not region:
            raise ConfigError("vertex.region: not set (for example us-east5 or global)")
        client = anthropic.AsyncAnthropicVertex(
            project_id=project,
            region=region,
            credentials=credentials,
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout,
        )
        super().__init__(
            client,
            model=model,
            max_tokens=max_tokens,
            base_url=str(client.base_url),
            prompt_caching=prompt_caching,
            vision=vision,
        )


def _credentials(credentials_file: str | None) -> tuple[Any, str | None]:
    """Load the credentials now, so a missing or broken one is a clear error at start."""
    path = credentials_file or os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if not path and _ADC.expanduser().exists():
        path = str(_ADC.expanduser())
    if not path:
        raise ConfigError(
            "vertex: no Google credentials found; set vertex.credentials_file or "
            "GOOGLE_APPLICATION_CREDENTIALS (or run gcloud auth application-default login)"
        )
    file = Path(path).expanduser()
    try:
        info = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"vertex.credentials_file: cannot read {file}: {exc}") from exc
    kind = info.get("type") if isinstance(info, dict) else None
    # Only the two kinds a user makes on purpose; an unexpected kind is refused, not trusted.
    try:
        if kind == "service_account":
            credentials = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
            return credentials, info.get("project_id")
        if kind == "authorized_user":
            credentials = user_credentials.Credentials.from_authorized_user_info(
                info, scopes=SCOPES
            )
            return credentials, info.get("quota_project_id")
    except (GoogleAuthError, ValueError, KeyError) as exc:
        raise ConfigError(f"vertex.credentials_file: {file}: {exc}") from exc
    raise ConfigError(
        f"vertex.credentials_file: {file} holds {kind!r} credentials; "
        "use a service account key or gcloud's application-default credentials"
    )
