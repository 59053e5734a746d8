// Checks what `./mvnw -Prelease -Dgpg.skip install` produced, the way Maven Central's validation
// would see it (run by scripts/release-check.sh: `java scripts/release/ReleaseCheck.java REPO`,
// from the repository root, after the build; REPO is the private local repository it installed
// into). A single-file Java program so that it needs nothing beyond the JDK.
//
// For every published module (every module of the parent POM except those that set
// tpcomm.skipPublishing=true): the main, sources and javadoc jars exist; the sources jar holds Kotlin
// sources; the javadoc jar holds Dokka's HTML (index.html and the module's page); the main jar's
// manifest has a valid, unique Automatic-Module-Name under dev.tpcomm; name, description, url,
// licenses, developers and scm are present (in the module's POM or inherited from the parent).
// The BOM pins exactly the published modules at the parent's version and nothing else. The
// release profile signs and publishes. Unpublished modules skip deploy and Central publishing.
// Prints one line per finding and exits 1 when anything is wrong.

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.jar.JarFile;
import java.util.regex.Pattern;
import javax.xml.parsers.DocumentBuilderFactory;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.Node;
import org.w3c.dom.NodeList;

public class ReleaseCheck {
    static final List<String> problems = new ArrayList<>();
    static int checks = 0;

    static void check(boolean ok, String what) {
        checks++;
        if (!ok) problems.add(what);
    }

    static Document parse(Path pom) throws Exception {
        var f = DocumentBuilderFactory.newInstance();
        f.setNamespaceAware(false);
        return f.newDocumentBuilder().parse(pom.toFile());
    }

    /** The text of the first direct child of [parent] named [name], or null. */
    static String child(Element parent, String name) {
        Element e = childElement(parent, name);
        return e == null ? null : e.getTextContent().trim();
    }

    static Element childElement(Element parent, String name) {
        if (parent == null) return null;
        NodeList nodes = parent.getChildNodes();
        for (int i = 0; i < nodes.getLength(); i++) {
            Node n = nodes.item(i);
            if (n instanceof Element e && e.getTagName().equals(name)) return e;
        }
        return null;
    }

    static List<Element> children(Element parent, String name) {
        List<Element> out = new ArrayList<>();
        if (parent == null) return out;
        NodeList nodes = parent.getChildNodes();
        for (int i = 0; i < nodes.getLength(); i++) {
            if (nodes.item(i) instanceof Element e && e.getTagName().equals(name)) out.add(e);
        }
        return out;
    }

    static String property(Element project, String name) {
        return child(childElement(project, "properties"), name);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: java scripts/release/ReleaseCheck.java LOCAL_REPO (from the repository root)");
            System.exit(2);
        }
        Path repo = Path.of(args[0]);
        Element parent = parse(Path.of("pom.xml")).getDocumentElement();
        String group = child(parent, "groupId");
        String version = child(parent, "version");
        String parentArtifact = child(parent, "artifactId");

        // Publication metadata of the parent, which every module inherits.
        for (String tag : List.of("name", "description", "url")) {
            check(child(parent, tag) != null && !child(parent, tag).isEmpty(), "parent POM has no <" + tag + ">");
        }
        Element license = childElement(childElement(parent, "licenses"), "license");
        check(license != null && "Apache-2.0".equals(child(license, "name")) && child(license, "url") != null,
            "parent POM: <licenses> must name Apache-2.0 with its url");
        Element developer = childElement(childElement(parent, "developers"), "developer");
        check(developer != null && child(developer, "name") != null, "parent POM: <developers> needs a developer with a name");
        Element scm = childElement(parent, "scm");
        check(scm != null && child(scm, "url") != null && child(scm, "connection") != null && child(scm, "developerConnection") != null,
            "parent POM: <scm> needs url, connection and developerConnection");
        check(Files.isRegularFile(Path.of("LICENSE")) && Files.readString(Path.of("LICENSE")).contains("Apache License")
            && Files.readString(Path.of("LICENSE")).contains("Version 2.0"), "LICENSE must hold the Apache License 2.0");

        // The release profile: signing and the Central Portal plugin.
        String parentText = Files.readString(Path.of("pom.xml"));
        for (String needle : List.of("<id>release</id>", "maven-gpg-plugin", "central-publishing-maven-plugin", "maven-source-plugin", "dokka-maven-plugin")) {
            check(parentText.contains(needle), "parent POM: the release profile needs " + needle);
        }
        check(Files.isRegularFile(repo.resolve(group.replace('.', '/') + "/" + parentArtifact + "/" + version + "/" + parentArtifact + "-" + version + ".pom")),
            "the parent POM is not installed in " + repo + " (published modules refer to it)");

        List<String> published = new ArrayList<>();
        Map<String, String> moduleNames = new HashMap<>();
        String bomModule = null;
        for (Element m : children(childElement(parent, "modules"), "module")) {
            String dir = m.getTextContent().trim();
            Element pom = parse(Path.of(dir, "pom.xml")).getDocumentElement();
            String artifact = child(pom, "artifactId");
            if ("pom".equals(child(pom, "packaging")) && artifact.endsWith("-bom")) { bomModule = dir; continue; }
            Element pomParent = childElement(pom, "parent");
            check(pomParent != null && parentArtifact.equals(child(pomParent, "artifactId")), dir + ": must inherit from " + parentArtifact + " (the metadata comes from it)");
            check(child(pom, "name") != null && child(pom, "description") != null, dir + ": POM needs its own <name> and <description>");
            if ("true".equals(property(pom, "tpcomm.skipPublishing"))) {
                check("true".equals(property(pom, "maven.deploy.skip")), dir + ": not published, so it must also set maven.deploy.skip");
                continue;
            }
            published.add(artifact);
            Path target = Path.of(dir, "target");
            Path main = target.resolve(artifact + "-" + version + ".jar");
            Path sources = target.resolve(artifact + "-" + version + "-sources.jar");
            Path javadoc = target.resolve(artifact + "-" + version + "-javadoc.jar");
            for (Path jar : List.of(main, sources, javadoc)) {
                check(Files.isRegularFile(jar), dir + ": missing " + jar);
                Path installed = repo.resolve(group.replace('.', '/') + "/" + artifact + "/" + version + "/" + jar.getFileName());
                check(Files.isRegularFile(installed), dir + ": not installed: " + installed);
            }
            if (Files.isRegularFile(main)) {
                try (var jar = new JarFile(main.toFile())) {
                    String name = jar.getManifest() == null ? null : jar.getManifest().getMainAttributes().getValue("Automatic-Module-Name");
                    check(name != null && !name.equals("dev.tpcomm.unset") && Pattern.matches("dev\\.tpcomm(\\.[a-z][a-z0-9]*)+", name),
                        dir + ": Automatic-Module-Name '" + name + "' is missing or not a dev.tpcomm.* module name (set tpcomm.module.name in its POM)");
                    String other = moduleNames.put(name, dir);
                    check(other == null, dir + ": Automatic-Module-Name '" + name + "' is also " + other + "'s");
                    check(jar.stream().anyMatch(e -> e.getName().endsWith(".class")), dir + ": main jar has no classes");
                }
            }
            if (Files.isRegularFile(sources)) {
                try (var jar = new JarFile(sources.toFile())) {
                    check(jar.stream().anyMatch(e -> e.getName().endsWith(".kt") || e.getName().endsWith(".java")), dir + ": sources jar has no sources");
                }
            }
            if (Files.isRegularFile(javadoc)) {
                try (var jar = new JarFile(javadoc.toFile())) {
                    check(jar.getEntry("index.html") != null, dir + ": javadoc jar has no index.html (Dokka did not run?)");
                    long pages = jar.stream().filter(e -> e.getName().endsWith(".html")).count();
                    check(pages >= 5, dir + ": javadoc jar has only " + pages + " HTML pages");
                    check(jar.stream().anyMatch(e -> e.getName().startsWith(artifact + "/")), dir + ": javadoc jar has no " + artifact + "/ pages");
                }
            }
        }
        check(published.size() >= 7, "expected at least the 7 library modules to be published, found " + published);

        // The BOM: same version, exactly the published modules, nothing else, installed.
        check(bomModule != null, "the parent lists no *-bom module");
        if (bomModule != null) {
            Element bom = parse(Path.of(bomModule, "pom.xml")).getDocumentElement();
            String bomArtifact = child(bom, "artifactId");
            check(group.equals(child(bom, "groupId")) && version.equals(child(bom, "version")),
                bomModule + ": groupId/version must equal the parent's (" + group + ":" + version + ")");
            check(childElement(bom, "parent") == null, bomModule + ": must not inherit from the parent (its dependencyManagement would leak into users' builds)");
            for (String tag : List.of("name", "description", "url")) check(child(bom, tag) != null, bomModule + ": needs <" + tag + ">");
            check(childElement(bom, "licenses") != null && childElement(bom, "developers") != null && childElement(bom, "scm") != null,
                bomModule + ": needs licenses, developers and scm");
            var pinned = new TreeSet<String>();
            for (Element d : children(childElement(childElement(bom, "dependencyManagement"), "dependencies"), "dependency")) {
                check(group.equals(child(d, "groupId")), bomModule + ": pins a foreign artifact " + child(d, "groupId") + ":" + child(d, "artifactId"));
                check("${project.version}".equals(child(d, "version")), bomModule + ": " + child(d, "artifactId") + " must be pinned at ${project.version}");
                pinned.add(child(d, "artifactId"));
            }
            check(pinned.equals(new TreeSet<>(published)), bomModule + ": pins " + pinned + " but the published modules are " + new TreeSet<>(published));
            Path installedBom = repo.resolve(group.replace('.', '/') + "/" + bomArtifact + "/" + version + "/" + bomArtifact + "-" + version + ".pom");
            check(Files.isRegularFile(installedBom), "BOM not installed: " + installedBom);
        }

        System.out.println("release check: " + published.size() + " published modules " + published + ", module names " + new TreeSet<>(moduleNames.keySet())
            + "; " + checks + " checks, " + problems.size() + " problems");
        for (String p : problems) System.out.println("  PROBLEM: " + p);
        System.exit(problems.isEmpty() ? 0 : 1);
    }
}
