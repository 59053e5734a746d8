package dev.tpcomm.bench

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.shouldBe
import java.nio.file.Files
import java.nio.file.Path

/**
 * Issue 19, item 3: every class comm-bench ships is in comm-bench's own package (`dev.tpcomm.bench`
 * and below), none in another module's (it declared `dev.tpcomm.mpi.MpiAllReduceBench`, a split
 * package with comm-mpi).
 */
class BenchPackagesTest : FunSpec({
    test("comm-bench's main classes all live under dev.tpcomm.bench") {
        val root = Path.of(BenchResult::class.java.protectionDomain.codeSource.location.toURI())
        val classes = Files.walk(root).use { s -> s.filter { it.toString().endsWith(".class") }.map { root.relativize(it).toString().replace('\\', '/') }.toList() }
        (classes.size > 10) shouldBe true
        classes.filterNot { it.startsWith("dev/tpcomm/bench/") || it.startsWith("META-INF/") }.shouldBeEmpty()
    }

    test("the MPI all-reduce benchmark is dev.tpcomm.bench.mpi.MpiAllReduceBench") {
        Class.forName("dev.tpcomm.bench.mpi.MpiAllReduceBench").getMethod("main", Array<String>::class.java) // the entry point scripts/mpi-vs-c.sh runs
    }
})
