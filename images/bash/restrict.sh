#!/bin/sh
# Runs as root in the build stage of the restricted bash image, after
# setup-image.sh. Removes package managers, compilers, network clients and
# tools that change identity or namespaces, strips every setuid/setgid bit,
# then checks its own work: the build fails if anything forbidden remains.
set -eu

say() { echo "restrict: $*"; }

# Globs, matched against file names in the PATH directories below.
package_managers='apt apt-* aptitude dpkg dpkg-* debconf* update-alternatives pip pip3 pip3.* easy_install* ensurepip cpan cpan5*'
compilers='gcc gcc-* *-gcc *-gcc-* cc c++ g++ g++-* *-g++* cpp cpp-* *-cpp* clang clang-* clang++* tcc as *-as ld ld.* *-ld *-ld.* gold'
network_clients='curl wget nc nc.* netcat ncat ssh ssh-* scp sftp telnet ftp socat ping ping4 ping6 git git-* scalar openssl rsync busybox'
identity_tools='su sudo sudoedit login newgrp sg passwd chsh chfn chage expiry gpasswd useradd userdel usermod groupadd groupdel groupmod adduser deluser addgroup delgroup runuser setpriv nsenter unshare chroot pivot_root switch_root mount umount fusermount* capsh setcap getcap unix_chkpwd unix_update sulogin
  chpasswd chgpasswd newusers vipw vigr cppw cpgr pam_timestamp_check mkhomedir_helper
  losetup swapon swapoff'

path_dirs='/usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin'

remove_named() {
  for dir in $path_dirs; do
    [ -d "$dir" ] || continue
    for pattern in $package_managers $compilers $network_clients $identity_tools; do
      for path in "$dir"/$pattern; do
        if [ -e "$path" ] || [ -L "$path" ]; then rm -f "$path"; fi
      done
    done
  done
}

say "removing package managers, compilers, network clients, identity tools"
remove_named
# What the removed tools leave behind: apt's download methods (http, https
# clients in their own right), git's helpers, the package databases.
rm -rf /usr/lib/apt /etc/apt /var/lib/apt /var/cache/apt /var/cache/debconf \
       /var/lib/dpkg /etc/dpkg /usr/lib/git-core /usr/share/git-core \
       /usr/libexec/git-core /usr/lib/openssh /usr/lib/dpkg /usr/libexec/dpkg
# ... and their cron jobs, timers, completions and helper scripts, wherever they are.
find / -xdev \( -name apt -o -name 'apt-*' -o -name dpkg -o -name 'dpkg-*' \
  -o -name git -o -name 'git-*' -o -name gitk -o -name gitweb \) -prune -exec rm -rf {} +
# Shell completions of commands that are gone.
for completion in /usr/share/bash-completion/completions/*; do
  [ -e "$completion" ] || continue
  command -v "${completion##*/}" >/dev/null 2>&1 || rm -f "$completion"
done

say "stripping setuid/setgid bits"
find / -xdev -perm /6000 -exec chmod ug-s {} +

# Check: nothing forbidden is reachable by name or by mode.
status=0
for dir in $path_dirs; do
  [ -d "$dir" ] || continue
  for pattern in $package_managers $compilers $network_clients $identity_tools; do
    for path in "$dir"/$pattern; do
      if [ -e "$path" ] || [ -L "$path" ]; then say "still present: $path" >&2; status=1; fi
    done
  done
done
leftover=$(find / -xdev -perm /6000)
if [ -n "$leftover" ]; then say "setuid/setgid files remain: $leftover" >&2; status=1; fi
if python3 -m pip --version >/dev/null 2>&1; then say "python3 -m pip still works" >&2; status=1; fi
for tool in bash python3 ls cat cp mv rm mkdir find xargs grep sed awk diff sort head tail wc; do
  command -v "$tool" >/dev/null || { say "needed tool missing: $tool" >&2; status=1; }
done
[ "$status" = 0 ] && say "done"
exit "$status"
