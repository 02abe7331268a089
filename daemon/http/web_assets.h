// The status page's files (daemon/http/web/ and the bundled charting library), built into
// longhauld by tools/embed_assets.py at build time: the daemon serves its page with nothing
// read from disk and nothing fetched at run time.
#pragma once

#include <string_view>
#include <vector>

namespace longhaul::http {

struct WebAsset {
  std::string_view path;          // the URL path it is served at, e.g. "/" or "/assets/app.js"
  std::string_view content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view body;
};

// Every asset, the page itself ("/") first.
const std::vector<WebAsset>& WebAssets();

}  // namespace longhaul::http
