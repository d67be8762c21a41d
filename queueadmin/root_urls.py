"""The standalone service's URLs (ROOT_URLCONF of queueadmin.settings): the
Django admin, the login pages and queueadmin at the site root."""
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("queueadmin.urls")),
]
