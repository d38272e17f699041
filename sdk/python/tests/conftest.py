import sys
from pathlib import Path

# fake.py sits beside the tests; make it importable whatever directory pytest starts in.
sys.path.insert(0, str(Path(__file__).parent))
