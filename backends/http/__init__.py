"""OpenAI-compatible servers over HTTP: the HTTP/1.1 client, server-sent events, the streaming client."""
