import sys
from pathlib import Path

# The helpers (servers.py, crawl_sites.py) live next to the tests.
sys.path.insert(0, str(Path(__file__).parent))
