"""Generated from proto/rowgate/v1 by scripts/gen_proto.sh; do not edit."""
