#!/usr/bin/env python3
"""Writes a C++ source that holds files as byte arrays, for longhauld's status page.

Usage: embed_assets.py OUT.cc "URL_PATH|CONTENT_TYPE|FILE" ...

The source defines longhaul::http::WebAssets() (daemon/http/web_assets.h): one entry per
argument, in the order given, so the daemon serves its page with nothing read from disk and
nothing fetched at run time. Bazel runs it at build time (daemon/http/BUILD).
"""
import sys


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    out, specs = argv[1], argv[2:]
    lines = [
        "// Generated at build time by tools/embed_assets.py: do not edit.",
        '#include "daemon/http/web_assets.h"',
        "",
        "namespace longhaul::http {",
        "namespace {",
    ]
    entries = []
    for i, spec in enumerate(specs):
        parts = spec.split("|", 2)
        if len(parts) != 3 or not parts[0].startswith("/"):
            sys.stderr.write("embed_assets: bad argument %r (want /path|type|file)\n" % spec)
            return 2
        path, ctype, name = parts
        with open(name, "rb") as f:
            data = f.read()
        body = ",".join(str(b) for b in data)
        # One extra zero keeps an empty file a valid array; the view excludes it.
        lines.append("const unsigned char k%d[] = {%s%s0};" % (i, body, "," if data else ""))
        entries.append('    {"%s", "%s", std::string_view(reinterpret_cast<const char*>(k%d), %d)},'
                       % (path, ctype, i, len(data)))
    lines += [
        "}  // namespace",
        "",
        "const std::vector<WebAsset>& WebAssets() {",
        "  static const std::vector<WebAsset> assets = {",
    ] + entries + [
        "  };",
        "  return assets;",
        "}",
        "",
        "}  // namespace longhaul::http",
        "",
    ]
    with open(out, "w") as f:
        f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
