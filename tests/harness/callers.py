"""The principals tests call as (trusted-header identity): one name per role, so that a test
reads as who does what. Policies grant to these strings; `--admin ADMIN` makes one an admin."""

ADMIN = "user:admin@example.com"
ANN = "user:ann@example.com"
ALICE = "user:alice@example.com"
BOB = "user:bob@example.com"
CAROL = "user:carol@example.com"
READER = "user:reader@example.com"
MALLORY = "user:mallory@example.com"  # the attacker
