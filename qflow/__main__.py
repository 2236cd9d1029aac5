from qflow.cli import run

run()
