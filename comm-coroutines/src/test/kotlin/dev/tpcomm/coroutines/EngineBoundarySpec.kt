package dev.tpcomm.coroutines

import dev.tpcomm.engine.CommunicatorCreation
import dev.tpcomm.engine.DeadlineWatchdog
import dev.tpcomm.engine.RankOrderReduction
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.shouldBe
import java.io.File

/**
 * The architecture as a test (docs/ARCHITECTURE.md): the front owns validation, signatures,
 * deadlines and the exception factory, so no backend calls them itself; the engine (package
 * `dev.tpcomm.coroutines`) does not depend on the in-process backend (`.local`), and no other module
 * reaches into it. Reads the main sources of the repository this test runs in.
 */
class EngineBoundarySpec : FunSpec({
    val root = generateSequence(File("").absoluteFile) { it.parentFile }.first { File(it, "comm-api").isDirectory && File(it, "pom.xml").isFile }

    fun sources(vararg dirs: String): List<File> = dirs.flatMap { d ->
        File(root, d).walkTopDown().filter { it.isFile && it.extension == "kt" }.toList()
    }

    /** Lines of [files] (comments skipped) that match [pattern], as `path:line: text`. */
    fun uses(files: List<File>, pattern: Regex, allowed: Set<String> = emptySet()): List<String> = files
        .filter { it.name !in allowed }
        .flatMap { f ->
            f.readLines().withIndex()
                .filter { (_, l) -> val t = l.trim(); !t.startsWith("*") && !t.startsWith("//") && !t.startsWith("/*") && pattern.containsMatchIn(l) }
                .map { (i, l) -> "${f.relativeTo(root)}:${i + 1}: ${l.trim()}" }
        }

    val engine = File(root, "comm-coroutines/src/main/kotlin/dev/tpcomm/coroutines").listFiles { f -> f.isFile && f.extension == "kt" }!!.toList()
    val backends = sources(
        "comm-coroutines/src/main/kotlin/dev/tpcomm/coroutines/local", "comm-mpi/src/main", "comm-gpu/src/main", "comm-nccl/src/main", "comm-rccl/src/main",
    )
    val others = sources(
        "comm-mpi/src/main", "comm-gpu/src/main", "comm-nccl/src/main", "comm-rccl/src/main", "comm-java-interop/src/main",
        "comm-testkit/src/main", "comm-djl/src/main", "comm-bench/src/main", "comm-examples/src/main",
    )

    test("the engine does not depend on the in-process backend, except the backend's own public entry points") {
        // runLocalWorld and LocalWorld are the in-process backend's public face, in the module's package (DESIGN.md);
        // RankOrderReduction is its reduction kernels' face, for a backend that reduces gathered elements on the host (MPI).
        uses(engine, Regex("""dev\.tpcomm\.coroutines\.local"""), allowed = setOf("LocalWorld.kt", "RunLocalWorld.kt", "RankOrderReduction.kt")).shouldBeEmpty()
    }

    test("no other module reaches into the in-process backend") {
        uses(others, Regex("""dev\.tpcomm\.coroutines\.local""")).shouldBeEmpty()
    }

    test("no backend validates, encodes or compares a signature, or registers a deadline itself: the front does") {
        uses(backends, Regex("""\bvalidator\.\w+\(""")).shouldBeEmpty()
        uses(backends, Regex("""CollectiveSignature\.(encode|encodeShape|of|compare)\b""")).shouldBeEmpty()
        uses(backends, Regex("""DeadlineWatchdog\.register|:\s*DeadlineWatchdog\.Watched""")).shouldBeEmpty()
        uses(backends + others, Regex("""interface\s+\w*Watched\b""")).shouldBeEmpty()
    }

    test("a backend is composed into the front, never a subclass of it; the handles users hold forward to a front") {
        // issue 32: the front is final (no backend can override an operation, a failure path or close),
        // and MpiCommunicator/NcclCommunicator are handles (Communicator by front), not subclasses of it.
        java.lang.reflect.Modifier.isFinal(dev.tpcomm.engine.CommunicatorFront::class.java.modifiers) shouldBe true
        uses(backends + others + engine, Regex(""":\s*CommunicatorFront\(""")).shouldBeEmpty()
        uses(backends, Regex(""":\s*CommunicatorBackend\(\)""")).size shouldBe 3
        uses(backends, Regex("""\)\s*:\s*Communicator by front,""")).size shouldBe 2
    }

    test("exceptions come from the front's factory; CommunicationErrors is built directly only where no communicator exists yet") {
        // Creation, before a communicator exists, has the core's CommunicatorCreation; LocalWorldState is the world's own, not one rank's.
        uses(backends, Regex("""CommunicationErrors\("""), allowed = setOf("LocalWorldState.kt")).shouldBeEmpty()
        // The front's factory (protected) is reached through exceptionOf and its helpers; a backend's
        // MonitoredBarrierChannel hands it to the core's barrier protocol, which builds its exceptions.
        uses(backends, Regex("""\berrors\.(timeout|aborted|mismatch|failure|nativeError|closed)\(""")).shouldBeEmpty()
    }
})
