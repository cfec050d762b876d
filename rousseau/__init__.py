"""rousseau: a chat-agent daemon, and the agent library it is built on."""

__version__ = "0.1.0"
