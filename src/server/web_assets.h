#pragma once
// Files served as they are, compiled into the binary (no CDN, nothing read at
// run time): the web page and the OpenAPI description. CMakeLists.txt makes
// web_assets.cpp from src/server/web/.
#include <cstddef>

namespace tally::server {

extern const unsigned char kIndexHtml[];
extern const size_t kIndexHtmlSize;
extern const unsigned char kOpenApiJson[];
extern const size_t kOpenApiJsonSize;

}  // namespace tally::server
