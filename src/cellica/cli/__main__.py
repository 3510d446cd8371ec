from cellica.cli.app import run

run()
