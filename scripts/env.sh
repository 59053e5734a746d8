# Sourced by the scripts: finds a JDK 25+ and exports JAVA_HOME, or exits with what to install.
tpcomm_java_major() { "$1/bin/java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p' | head -1; }
tpcomm_find_jdk() {
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    local v; v=$(tpcomm_java_major "$JAVA_HOME")
    if [ -n "$v" ] && [ "$v" -ge 25 ] 2>/dev/null; then return 0; fi
  fi
  local candidate
  for candidate in /usr/lib/jvm/temurin-25-jdk* /usr/lib/jvm/temurin-2[6-9]-jdk* /usr/lib/jvm/*25* /usr/lib/jvm/*; do
    [ -x "$candidate/bin/java" ] || continue
    local v; v=$(tpcomm_java_major "$candidate")
    if [ -n "$v" ] && [ "$v" -ge 25 ] 2>/dev/null; then export JAVA_HOME="$candidate"; return 0; fi
  done
  echo "tpcomm needs JDK 25 or newer (java.lang.foreign). None found: JAVA_HOME=${JAVA_HOME:-unset}, nothing in /usr/lib/jvm." >&2
  echo "Install one (e.g. 'apt-get install temurin-25-jdk' from Adoptium's repository) or set JAVA_HOME to it." >&2
  exit 1
}
tpcomm_find_jdk
export PATH="$JAVA_HOME/bin:$PATH"
export MAVEN_OPTS="${MAVEN_OPTS:-} -Xss4m"
