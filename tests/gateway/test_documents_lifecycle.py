"""Documents per tenant: list (newest first, paged), get, delete; another tenant sees none of them."""
from __future__ import annotations

import httpx

from tests.gateway.conftest import Keys, auth


async def _create(client: httpx.AsyncClient, key: str, title: str) -> str:
    r = await client.post("/v1/documents", headers=auth(key), json={"title": title, "text": f"{title}: net 30 days."})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_list_get_delete_per_tenant(client: httpx.AsyncClient, keys: Keys) -> None:
    ids = [await _create(client, keys.acme, f"contract {i}") for i in range(3)]
    theirs = await _create(client, keys.globex, "globex contract")
    listed = (await client.get("/v1/documents", headers=auth(keys.acme), params={"limit": 100})).json()
    mine = [d["id"] for d in listed["data"]]
    assert set(ids) <= set(mine) and theirs not in mine
    assert [m for m in mine if m in ids] == ids[::-1]  # newest first
    page = (await client.get("/v1/documents", headers=auth(keys.acme), params={"limit": 1})).json()
    assert page["has_more"] and len(page["data"]) == 1
    nxt = (await client.get("/v1/documents", headers=auth(keys.acme),
                            params={"limit": 1, "after": page["data"][0]["id"]})).json()
    assert nxt["data"][0]["id"] != page["data"][0]["id"]
    assert (await client.get(f"/v1/documents/{ids[0]}", headers=auth(keys.acme))).json()["title"] == "contract 0"
    # another tenant can neither see nor delete it
    assert (await client.delete(f"/v1/documents/{ids[0]}", headers=auth(keys.globex))).status_code == 404
    r = await client.delete(f"/v1/documents/{ids[0]}", headers=auth(keys.acme))
    assert r.status_code == 200 and r.json() == {"id": ids[0], "object": "document.deleted", "deleted": True}
    assert (await client.get(f"/v1/documents/{ids[0]}", headers=auth(keys.acme))).status_code == 404
    r = await client.post(f"/v1/documents/{ids[0]}/questions", headers=auth(keys.acme), json={"question": "Terms?"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "document_not_found"
    assert (await client.delete(f"/v1/documents/{ids[0]}", headers=auth(keys.acme))).status_code == 404
    left = (await client.get("/v1/documents", headers=auth(keys.acme), params={"limit": 100})).json()
    assert ids[0] not in [d["id"] for d in left["data"]]


async def test_a_key_limited_to_another_class_may_not_list_read_or_delete_documents(client: httpx.AsyncClient,
                                                                                    keys: Keys) -> None:
    doc = await _create(client, keys.acme, "contract")
    for method, path in (("GET", "/v1/documents"), ("GET", f"/v1/documents/{doc}"), ("DELETE", f"/v1/documents/{doc}"),
                         ("GET", "/v1/documents/doc-missing")):
        r = await client.request(method, path, headers=auth(keys.risk_only))
        assert r.status_code == 403 and r.json()["error"]["code"] == "class_forbidden", (method, path, r.text)
    assert (await client.get(f"/v1/documents/{doc}", headers=auth(keys.acme))).status_code == 200  # still there
