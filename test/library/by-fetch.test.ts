import { expect, it } from "vitest";
import { createAlbumService } from "../../src/library/album.ts";
import { albumOf, startPhotoService } from "../album/photo-service.ts";

it("answers an album when called with a Request: no listener, no port", async () => {
  const photos = await startPhotoService(albumOf(2)); // a real photo service on loopback
  const album = await createAlbumService({ settings: { PHOTOS_API_BASE_URL: photos.url } });
  const response = await album.fetch(new Request("http://localhost/api/albums/5"));
  expect(response.status).toBe(200);
  expect(await response.json()).toMatchObject({ albumId: 5, photos: [{ id: 1 }, { id: 2 }] });
  await photos.close();
});
