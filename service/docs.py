"""The API's documentation pages, served from files shipped with the Python package and never
from a CDN, so an air-gapped cluster has its docs too: `GET /docs` (Swagger UI) and `GET /redoc`
(ReDoc), with their scripts, styles and icon under `GET /docs-assets/`.

The files are Swagger UI's and ReDoc's dist bundles from the PyPI package `fastapi-offline`
(MIT; Swagger UI is Apache-2.0, ReDoc MIT), mounted as static files; the pages are FastAPI's own,
built as its "self-hosting JavaScript and CSS for docs" recipe says (`docs_url=None`, then
`get_swagger_ui_html(swagger_js_url=..., swagger_css_url=...)` pointing at the mount). Like
/openapi.json, the pages and files are public: they describe the API and hold no secret. There is
no OAuth2 redirect page (`/docs/oauth2-redirect`): the API key is a bearer token, typed into
Swagger UI's Authorize dialog.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

DOCS = "/docs"
REDOC = "/redoc"
ASSETS = "/docs-assets"
ASSET_DIR = (
    files("fastapi_offline") / "static"
)  # swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png


def _root(request: Request) -> str:
    """The prefix the app is mounted under (uvicorn's --root-path), as FastAPI's own pages use it."""
    return request.scope.get("root_path", "").rstrip("/")


def install(app: FastAPI) -> None:
    """Mount the assets and add /docs and /redoc to `app` (made with docs_url=None, redoc_url=None)."""
    app.mount(ASSETS, StaticFiles(directory=str(ASSET_DIR)), name="docs-assets")

    @app.get(DOCS, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = _root(request)
        return get_swagger_ui_html(
            openapi_url=root + app.openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    @app.get(REDOC, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = _root(request)
        return get_redoc_html(
            openapi_url=root + app.openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
