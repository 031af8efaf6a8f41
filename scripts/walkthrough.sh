#!/usr/bin/env bash
# The main job: build libkvstore.so (release) and run the seed walkthrough, a C program
# written against MXNet's C API, linked with -lkvstore.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
mkdir -p target/ctests
cc -std=c11 -Wall -Wextra -Werror -I include ctests/walkthrough.c \
   -L target/release -lkvstore -Wl,-rpath,"$PWD/target/release" -o target/ctests/walkthrough
target/ctests/walkthrough
