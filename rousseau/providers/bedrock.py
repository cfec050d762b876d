"""Claude on AWS Bedrock through the Anthropic SDK's Bedrock client: tools, streaming, caching."""

from __future__ import annotations

from rousseau.agent import ConfigError, MissingExtraError
from rousseau.providers.anthropic import MessagesProvider

try:
    import anthropic
    import boto3
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the bedrock provider", "bedrock") from exc


class BedrockProvider(MessagesProvider):
    """Signs requests with AWS credentials from the usual sources (environment, profile, role)."""

    name = "bedrock"
    key_hint = "check the AWS credentials (AWS_ACCESS_KEY_ID / bedrock.profile) and their region"

    def __init__(
        self,
        *,
        model: str,
        region: str | None = None,
        profile: str | None = None,
        max_tokens: int = 8192,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        prompt_caching: bool = True,
        vision: bool = True,
    ) -> None:
        session = boto3.Session(profile_name=profile) if profile else boto3.Session()
        region = region or session.region_name
        if not region:
            raise ConfigError("bedrock.region: not set; set it or AWS_REGION")
        credentials = session.get_credentials()
        if credentials is None:
            raise ConfigError(
                "bedrock: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or bedrock.profile (or AWS_PROFILE)"
            )
        frozen = credentials.get_frozen_credentials()
        url = base_url or f"https://bedrock-runtime.{region}.amazonaws.com"
        client = anthropic.AsyncAnthropicBedrock(
            aws_access_key=frozen.access_key,
            aws_secret_key=frozen.secret_key,
            aws_session_token=frozen.token,
            aws_region=region,
            base_url=url,
            max_retries=max_retries,
            timeout=timeout,
        )
        super().__init__(
            client,
            model=model,
            max_tokens=max_tokens,
            base_url=url,
            prompt_caching=prompt_caching,
            vision=vision,
        )
