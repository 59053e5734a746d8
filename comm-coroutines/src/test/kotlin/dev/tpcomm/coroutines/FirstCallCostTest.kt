package dev.tpcomm.coroutines

import dev.tpcomm.coroutines.local.ChildJvm
import io.kotest.core.spec.style.FunSpec
import java.io.File
import io.kotest.matchers.ints.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain

/**
 * A fresh JVM's first communicator and first call pay only for what they use (issue 37): the JMX
 * platform server (hundreds of milliseconds to build, JFR's MBeans included) is not built on the
 * caller's path, and the JDK Flight Recorder is not initialised by an operation while no recording
 * runs. Each case is a child JVM, as a user's `java` command would be.
 */
class FirstCallCostTest : FunSpec({
    fun firstCallMillis(out: String): Int =
        Regex("first_call_ms=(\\d+)").find(out)?.groupValues?.get(1)?.toInt() ?: error("no first_call_ms in: $out")

    test("the JMX server is built off the caller's path: a 20 s server build does not delay the first call") {
        val (code, out) = ChildJvm.run(
            "dev.tpcomm.coroutines.FirstCallProgram",
            listOf("-Djavax.management.builder.initial=dev.tpcomm.coroutines.SlowMBeanServerBuilder"),
            emptyList(),
        )
        code shouldBe 0
        firstCallMillis(out) shouldBeLessThan 10_000
    }

    test("each rank's MBean is still registered, shortly after creation") {
        val (code, out) = ChildJvm.run("dev.tpcomm.coroutines.FirstCallProgram", emptyList(), listOf("mbeans"))
        code shouldBe 0
        out shouldContain "mbeans=2"
    }

    test("no JFR recording: the first operations do not initialise the Flight Recorder") {
        val classes = File.createTempFile("tpcomm-classes-", ".log")
        try {
            val (code, out) = ChildJvm.run(
                "dev.tpcomm.coroutines.FirstCallProgram",
                listOf("-Dtpcomm.jmx=false", "-Xlog:class+load=info:file=${classes.path}"),
                emptyList(),
            )
            code shouldBe 0
            out shouldContain "first_call_ms="
            val loaded = classes.readText()
            loaded shouldContain "dev.tpcomm.coroutines.FlightRecorder "
            loaded shouldNotContain "jdk.jfr.internal.MetadataRepository"
            loaded shouldNotContain "dev.tpcomm.coroutines.FlightEvents"
        } finally {
            classes.delete()
        }
    }

    test("a JFR recording started after the first calls (as jcmd JFR.start) records the operations that follow") {
        val (code, out) = ChildJvm.run("dev.tpcomm.coroutines.FirstCallProgram", listOf("-Dtpcomm.jmx=false"), listOf("jfr-later"))
        code shouldBe 0
        out shouldContain "jfr_events=2"
    }
})
