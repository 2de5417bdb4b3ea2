"""What the tests run against: throw-away servers (PostgreSQL, Chroma, infinity-emb), test
doubles (a scripted chat upstream) and their helpers. The benchmarks that need such a server
import it from here; nothing here imports ``benchmarks``."""
