// Package compose holds Berth's docker compose install (compose.yaml, the
// .env it reads, up.sh behind `make compose-up`, and install-plugin.sh,
// which builds Docker's compose plugin from source) and its test: a whole
// instance brought up with `docker compose up --wait`, a computer run
// through it, and nothing left after `docker compose down -v`.
package compose
