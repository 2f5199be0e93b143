# The two commands a newcomer needs: `make demo` (the main job) and `make test` (everything).
.PHONY: demo demo-down test setup lint bench

demo:        ## local control plane + simulated GPU nodes, shown
	bash tools/dev/demo.sh

demo-down:   ## stop the demo cluster
	bash tools/dev/demo.sh down

test:        ## install what is missing, lint, type-check, run every test tier this machine can run
	bash tools/dev/test.sh

setup:       ## only install (apt packages, .venv, control-plane binaries)
	bash tools/dev/setup.sh

bench:       ## every benchmark (prints figures, writes benchmarks/results/*.json)
	bash tools/dev/bench.sh
