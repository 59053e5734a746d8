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
    test("comm-bench's main sources all declare a package under dev.tpcomm.bench, in the matching folder") {
        // Sources, not target/classes: an incremental build leaves a moved class's old files behind.
        val roots = listOf(Path.of("src/main/kotlin"), Path.of("src/main/java")).filter { Files.isDirectory(it) }
        val sources = roots.flatMap { root ->
            Files.walk(root).use { s -> s.filter { it.toString().endsWith(".kt") || it.toString().endsWith(".java") }.toList() }.map { root to it }
        }
        (sources.size > 10) shouldBe true
        val misplaced = sources.mapNotNull { (root, file) ->
            val folder = root.relativize(file).parent.toString().replace('\\', '/')
            val pkg = Files.readAllLines(file).firstOrNull { it.startsWith("package ") }?.removePrefix("package ")?.trim()?.removeSuffix(";")
            if (folder.startsWith("dev/tpcomm/bench") && pkg != null && pkg.replace('.', '/') == folder) null else "$file (package $pkg)"
        }
        misplaced.shouldBeEmpty()
    }

    test("the MPI all-reduce benchmark is dev.tpcomm.bench.mpi.MpiAllReduceBench") {
        Class.forName("dev.tpcomm.bench.mpi.MpiAllReduceBench").getMethod("main", Array<String>::class.java) // the entry point scripts/mpi-vs-c.sh runs
    }
})
