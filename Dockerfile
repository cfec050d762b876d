# rousseau in a slim, non-root container. State and workspace are volumes.
#   docker build -t rousseau .   (more extras: --build-arg EXTRAS=openai,slack,postgres)
#   docker run -d --env-file rousseau.env -v rousseau-state:/var/lib/rousseau rousseau
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY rousseau ./rousseau
ARG EXTRAS=anthropic,openai,telegram
RUN python -m venv /opt/rousseau \
 && /opt/rousseau/bin/pip install --no-cache-dir ".[${EXTRAS}]"

FROM python:3.12-slim
RUN useradd --system --create-home --home-dir /var/lib/rousseau --shell /usr/sbin/nologin rousseau \
 && mkdir -p /etc/rousseau /var/lib/rousseau/workspace \
 && chown -R rousseau:rousseau /var/lib/rousseau
COPY --from=build /opt/rousseau /opt/rousseau
COPY deploy/config.yaml /etc/rousseau/config.yaml
ENV PATH=/opt/rousseau/bin:$PATH \
    HOME=/var/lib/rousseau \
    ROUSSEAU_CONFIG=/etc/rousseau/config.yaml \
    ROUSSEAU_HEALTH_LISTEN=0.0.0.0:9090 \
    PYTHONUNBUFFERED=1
USER rousseau
WORKDIR /var/lib/rousseau
VOLUME ["/var/lib/rousseau"]
EXPOSE 9090
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9090/healthz', timeout=4).status == 200 else 1)"
STOPSIGNAL SIGTERM
ENTRYPOINT ["rousseau"]
CMD ["run"]
