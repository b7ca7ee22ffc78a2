"""`python -m scalelab.record [--markdown]`: print result.json's JSON Schema (or its fields as tables)."""

import sys

from scalelab.record.publish import cli

sys.exit(cli())
