#!/bin/sh
# Install rousseau as a systemd service from this checkout. Run as root.
#   sh deploy/install.sh [EXTRAS]     (default extras: anthropic,openai,telegram)
set -eu
extras=${1:-anthropic,openai,telegram}
src=$(cd "$(dirname "$0")/.." && pwd)

if ! id rousseau >/dev/null 2>&1; then
  useradd --system --home /var/lib/rousseau --shell /usr/sbin/nologin rousseau
fi
install -d -o rousseau -g rousseau -m 0700 /var/lib/rousseau /var/lib/rousseau/workspace
install -d -m 0755 /etc/rousseau /opt/rousseau

python3 -m venv /opt/rousseau/venv
/opt/rousseau/venv/bin/pip install --quiet --upgrade pip
/opt/rousseau/venv/bin/pip install --quiet "$src[$extras]"

[ -f /etc/rousseau/config.yaml ] || install -m 0644 "$src/deploy/config.yaml" /etc/rousseau/config.yaml
[ -f /etc/rousseau/rousseau.env ] || install -m 0600 "$src/systemd/rousseau.env.example" /etc/rousseau/rousseau.env
install -m 0644 "$src/systemd/rousseau.service" /etc/systemd/system/rousseau.service

systemctl daemon-reload
echo "Installed. Put your secrets in /etc/rousseau/rousseau.env and your user id in"
echo "/etc/rousseau/config.yaml (telegram.allowlist), then:"
echo "  systemctl enable --now rousseau && journalctl -u rousseau -f"
