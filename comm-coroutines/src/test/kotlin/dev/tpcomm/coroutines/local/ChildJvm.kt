package dev.tpcomm.coroutines.local

import java.io.File
import java.util.concurrent.TimeUnit

/** Test aid: runs a program of the test classpath in a child JVM, as a user's `java` command would. */
internal object ChildJvm {
    /**
     * Runs [mainClass] with [jvmArgs] and [args] (`TPCOMM_MEMORY_BUDGET` removed from its environment,
     * so only the flags set the budget), killed after [limitSeconds]; prints and returns its exit
     * status and the last 4,000 characters of its output.
     */
    fun run(mainClass: String, jvmArgs: List<String>, args: List<String>, limitSeconds: Long = 120): Pair<Int, String> {
        val java = File(System.getProperty("java.home"), "bin/java").path
        val cp = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
        val log = File.createTempFile("tpcomm-child-", ".log")
        try {
            val pb = ProcessBuilder(listOf(java) + jvmArgs + listOf("-cp", cp, mainClass) + args)
                .redirectErrorStream(true).redirectOutput(log)
            pb.environment().remove("TPCOMM_MEMORY_BUDGET")
            val p = pb.start()
            if (!p.waitFor(limitSeconds, TimeUnit.SECONDS)) p.destroyForcibly().waitFor()
            val out = log.readText().takeLast(4000)
            println(out)
            return p.exitValue() to out
        } finally {
            log.delete()
        }
    }
}
